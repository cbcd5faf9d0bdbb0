"""`evaluate`: translations scored against references (and compared with each other);
`score`: the model's log-probability of given translations (forced decoding), and their
attention; `evaluate-alignments`: word alignments scored against gold ones."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from seq2seq.cli.app import app
from seq2seq.cli.decoding import FORCED_FIELDS, decoding_options, flag
from seq2seq.cli.option_groups import option_group
from seq2seq.cli.options import (
    DecodingLoading,
    GivenTranslations,
    Loading,
    Records,
    References,
    Runs,
)
from seq2seq.errors import UserError

if TYPE_CHECKING:
    from seq2seq.metrics import Scores
    from seq2seq.significance import Comparison


@app.command()
@decoding_options()
@option_group("loading", DecodingLoading)
def evaluate(
    ref: References = None,
    run: Runs = None,
    src: Annotated[
        Path | None, typer.Option("--src", help="source sentences, one per line (with --run)")
    ] = None,
    hyp: GivenTranslations = None,
    corpus: Annotated[
        str | None,
        typer.Option(
            metavar="CORPUS",
            help="a test corpus as a config gives one (a prefix, a .tsv or .jsonl file): its "
            "sources translated with --run, in the run's languages; its targets the references",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    *,
    loading: DecodingLoading,
    decode: dict,
) -> None:
    """Score a translation against --ref: BLEU, chrF and TER with sacrebleu signatures.
    Either --run and --src (translate the source with the decoding options), --run and
    --corpus (its pairs), or --hyp (a translation made elsewhere; several: each compared
    with the first, a paired test)."""
    from seq2seq.cli.translation import _translator, _within_memory

    if corpus is not None:
        sources, references = _corpus_pairs(corpus, run, [ref, src, hyp], decode.get("tgt_lang"))
        src = Path(corpus)  # what the scores are printed under
    else:
        if not ref:
            raise UserError("pass --ref FILE (the references), or --corpus CORPUS with --run")
        references = _read_references(ref)
        if hyp:
            given = {"run": run or None, "src": src, **dataclasses.asdict(loading), **decode}
            _score_files(hyp, references, given, as_json)
            return
        if not run or src is None:
            raise UserError("pass --run RUN and --src FILE to translate, or --hyp FILE to score")
        sources = _aligned_lines(src, ref[0], len(references[0]), "reference")
    with _within_memory(decode):
        translator = _translator(run, loading, None, decode)
        hypotheses = translator.translate(sources, progress=True)
    _print_scores([str(src)], [hypotheses], references, as_json)


def _corpus_pairs(
    corpus: str, run: list[Path] | None, others: list, tgt_lang: str | None
) -> tuple[list, list]:
    """The sources of a test corpus, and its references (one set), in the languages of the
    run that translates them (the target: `tgt_lang`, where one is given)."""
    from seq2seq.checkpoint import RunDir
    from seq2seq.data.sources import read_corpus

    if any(others):
        raise UserError(
            "--corpus gives the sources and the references: leave out --ref, --src, --hyp"
        )
    if not run:
        raise UserError("--corpus needs --run RUN, which translates its sources")
    data = RunDir(run[0]).load_config().data
    if data.src is None or data.tgt is None:
        raise UserError(
            f"--corpus reads the run's data.src and data.tgt, and {run[0]} names a pair per "
            "corpus: give --src and --ref (and --tgt-lang where it translates into several)"
        )
    pairs = read_corpus(corpus, data.src, tgt_lang or data.tgt)
    return pairs.src, [pairs.tgt]


def _read_references(paths: list[Path]) -> list[list[str]]:
    """The lines of each reference file: not empty, and as many in each."""
    from seq2seq.cli.translation import _read_lines

    streams = [_read_lines(path) for path in paths]
    for path, lines in zip(paths, streams, strict=True):
        if not lines:
            raise UserError(f"{path} is empty: nothing to score; give one reference per line")
        if len(lines) != len(streams[0]):
            raise UserError(
                f"{path} has {len(lines)} lines but {paths[0]} has {len(streams[0])}; give "
                "each reference file a line per source line"
            )
    return streams


def _aligned_lines(src: Path, ref: Path, references: int, what: str) -> list[str]:
    """The lines of `src`, which must be as many as the `references` lines of `ref`."""
    from seq2seq.cli.translation import _read_lines

    sources = _read_lines(src)
    if len(sources) != references:
        raise UserError(
            f"{src} has {len(sources)} lines but {ref} has {references}; give one {what} per "
            "source line"
        )
    return sources


def _refuse_given(why: str, options: dict) -> None:
    """One line naming the first of `options` given (not None or False) where `why` says it
    would do nothing."""
    given = [name for name, value in options.items() if value is not None and value is not False]
    if given:
        raise UserError(f"{why}; drop {flag(given[0])}")


def _score_files(
    paths: list[Path], references: list[list[str]], given: dict, as_json: bool
) -> None:
    """Translations made elsewhere scored as they are: an option that would decode is refused."""
    from seq2seq.cli.translation import _read_lines

    _refuse_given("--hyp scores a translation as it is: nothing decodes", given)
    _print_scores([str(p) for p in paths], [_read_lines(p) for p in paths], references, as_json)


def _print_scores(
    names: list[str], systems: list[list[str]], references: list[list[str]], as_json: bool
) -> None:
    """Each system's scores against the reference files' lines; with several systems, each
    compared with the first (one line each, or with `as_json` one JSON object; a list of
    them for several)."""
    from seq2seq.metrics import compare_to_first, score_corpus

    scores = [score_corpus(hypotheses, *references) for hypotheses in systems]
    if len(systems) == 1:
        print(json.dumps(scores[0].to_dict()) if as_json else str(scores[0]))
        return
    comparisons = [{}, *compare_to_first(systems, *references)]
    if as_json:
        found = zip(names, scores, comparisons, strict=True)
        print(json.dumps([_as_json(*one) for one in found]))
        return
    for name, own, against in zip(names, scores, comparisons, strict=True):
        print(f"{name}: {own}")
        if against:
            print(f"  against {names[0]}: {_differences(against)}")
    print(_comparison_note(len(references[0]), len(systems) - 1))


def _as_json(name: str, scores: Scores, against: dict[str, Comparison]) -> dict:
    differences = {
        key: {"difference": c.difference, "low": c.low, "high": c.high, "p": c.p_holm}
        for key, c in against.items()
    }
    return {"hyp": name, **scores.to_dict(), **({"against_first": differences} if against else {})}


def _differences(against: dict[str, Comparison]) -> str:
    """ "BLEU +0.49 [-0.09, +1.05] p 0.198  chrF ..." in the table's order."""
    from seq2seq.metrics import METRICS

    return "  ".join(
        f"{m.title} {c.difference:+.2f} [{c.low:+.2f}, {c.high:+.2f}] p {c.p_holm:.3f}"
        for m in METRICS
        for c in [against[m.key]]
    )


def _comparison_note(sentences: int, compared: int) -> str:
    from seq2seq.significance import CONFIDENCE

    holm = f", Holm-adjusted over the {compared} compared" if compared > 1 else ""
    return (
        f"(differences with their {CONFIDENCE:.0%} intervals and two-sided p{holm}: a paired "
        f"test over the {sentences:,} sentences; it counts which sentences were tested, not "
        "which model was trained: compare seeds with `seq2seq sweep`)"
    )


@app.command()
@decoding_options(FORCED_FIELDS)
@option_group("given", Records)
@option_group("loading", Loading)
def score(
    run: Runs,
    src: Annotated[Path, typer.Option("--src", help="source sentences, one per line")],
    ref: Annotated[Path, typer.Option("--ref", help="their translations to score, line-aligned")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="default: stdout")] = None,
    *,
    loading: Loading,
    given: Records,
    decode: dict,
) -> None:
    """Score each translation in --ref as the model's log-probability of it given its
    source in --src: a line per pair, LOGPROB<TAB>PER_TOKEN<TAB>NORMALISED (the total, EOS
    included; over the tokens; over the length penalty, as beam search ranks). Several
    --run or --checkpoint: an ensemble, whose log-probability is the mean of its models'.
    --alignments, --attention: each pair's word alignment and attention weights, those of
    the model's steps over the given translation."""
    # Here, not at the top: importing translation.py first would register its commands
    # before training.py's.
    from seq2seq.cli.translation import _read_lines, _translator, _within_memory
    from seq2seq.decode.line_io import RecordFiles, write_records
    from seq2seq.files import atomic_write_text

    alignments, attention, token_scores = given.alignments, given.attention, given.token_scores
    records = RecordFiles(alignments, attention, alignment_head=given.alignment_head)
    records.check()
    references = _read_lines(ref)
    sources = _aligned_lines(src, ref, len(references), "translation")
    with _within_memory(decode):
        translator = _translator(run, loading, None, decode)
        scores = translator.score(
            sources, references, progress=True, token_scores=token_scores is not None
        )
        asked = alignments or attention
        forced = translator.forced(sources, references, progress=True) if asked else None
    if forced is not None:
        write_records(translator, records, list(zip(sources, forced, strict=True)))
    if token_scores is not None:
        rows = [translator.token_score_record(s.pieces, s.token_scores) for s in scores]
        atomic_write_text(token_scores, "".join(json.dumps(row) + "\n" for row in rows))
    text = "".join(f"{s.log_prob:.4f}\t{s.per_token:.4f}\t{s.normalised:.4f}\n" for s in scores)
    if output is None:
        sys.stdout.write(text)
    else:
        atomic_write_text(output, text)


@app.command("evaluate-alignments")
def evaluate_alignments(
    gold: Annotated[
        Path,
        typer.Option(
            "--gold", help="gold word alignments, a Pharaoh line per pair: i-j sure, i?j possible"
        ),
    ],
    hyp: Annotated[
        Path,
        typer.Option(
            "--hyp",
            help="the word alignments to score (translate or score --alignments), a line per pair",
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Score word alignments against gold ones: the alignment error rate (AER; Och and
    Ney, 2003), precision and recall over all pairs (in %). Words count from 0, the
    source's first in each link."""
    from seq2seq.cli.translation import _read_lines
    from seq2seq.decode.alignment import alignment_error_rate

    scores = alignment_error_rate(_read_lines(hyp), _read_lines(gold))
    print(json.dumps(scores.to_dict()) if as_json else str(scores))
