"""Corpus-level BLEU, chrF and TER with their sacrebleu signatures; paired significance
tests; BLEU by source length."""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.significance import PairedTest, Result

from seq2seq.errors import UserError


@dataclass(frozen=True)
class Scores:
    bleu: float
    chrf: float
    ter: float  # edits per reference word, in percent: lower is better
    signature: str  # BLEU's sacrebleu signature
    chrf_signature: str
    ter_signature: str

    def to_dict(self) -> dict[str, float | str]:
        return asdict(self)

    def __str__(self) -> str:
        return f"BLEU {self.bleu:.2f}  chrF {self.chrf:.2f}  TER {self.ter:.2f}  ({self.signature})"


def _check_aligned(hypotheses: list[str], references: list[str]) -> None:
    if len(hypotheses) != len(references):
        raise UserError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; "
            "give one reference line per source line"
        )


def score_corpus(hypotheses: list[str], references: list[str]) -> Scores:
    """Score detokenized hypotheses against one detokenized reference each."""
    _check_aligned(hypotheses, references)
    bleu, chrf, ter = BLEU(), CHRF(), TER()
    return Scores(
        bleu=round(bleu.corpus_score(hypotheses, [references]).score, 2),
        chrf=round(chrf.corpus_score(hypotheses, [references]).score, 2),
        ter=round(ter.corpus_score(hypotheses, [references]).score, 2),
        signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        ter_signature=str(ter.get_signature()),
    )


def length_buckets(edges: tuple[int, ...]) -> list[str]:
    """Names of the buckets that `bleu_by_source_length` scores, e.g. (10, 20) ->
    ["1-9", "10-19", "20+"]."""
    starts = (1, *edges)
    return [f"{a}-{b - 1}" for a, b in zip(starts, edges, strict=False)] + [f"{starts[-1]}+"]


def bleu_by_source_length(
    sources: list[str], systems: list[list[str]], references: list[str], edges: tuple[int, ...]
) -> list[tuple[int, float | None]]:
    """(sentences, BLEU) per source-length bucket (see `length_buckets`; length in
    whitespace words): BLEU of the hypotheses of all `systems` in the bucket pooled, each
    system's line i paired with reference i (e.g. a cell's seeds); None for an empty bucket."""
    _check_aligned(sources, references)
    for hypotheses in systems:
        _check_aligned(hypotheses, references)
    buckets: list[list[int]] = [[] for _ in range(len(edges) + 1)]
    for i, source in enumerate(sources):
        buckets[bisect.bisect_right(edges, len(source.split()))].append(i)
    scores = []
    for lines in buckets:
        hypotheses = [system[i] for system in systems for i in lines]
        pooled = [references[i] for _ in systems for i in lines]
        bleu = round(BLEU().corpus_score(hypotheses, [pooled]).score, 2) if lines else None
        scores.append((len(lines), bleu))
    return scores


@dataclass(frozen=True)
class Significance:
    """p-values of a system against a baseline on the same sentences (two-sided)."""

    bleu_p: float
    chrf_p: float
    signature: str  # sacrebleu's BLEU signature of the test: resamples and seed


def paired_bootstrap(
    baseline: list[str], system: list[str], references: list[str], samples: int = 1000
) -> Significance:
    """sacrebleu's paired bootstrap resampling (Koehn, 2004) of `system` against `baseline`.

    Both are resampled with the same sentence indices; p is the share of resamples whose
    score difference is at least the observed one (after centring). sacrebleu fixes the
    seed (12345 unless SACREBLEU_SEED says otherwise), so a table is reproducible; the
    signature records it.
    """
    _check_aligned(baseline, references)
    _check_aligned(system, references)
    test = PairedTest(
        [("baseline", baseline), ("system", system)],
        {"BLEU": BLEU(), "chrF": CHRF()},
        [references],
        test_type="bs",
        n_samples=samples,
    )
    signatures, results = test()
    # Keyed by sacrebleu's metric names ("BLEU", "chrF2"), in the order given above.
    bleu, chrf = (_p_value(*results[name]) for name in signatures)
    return Significance(bleu_p=bleu, chrf_p=chrf, signature=str(next(iter(signatures.values()))))


def _p_value(baseline: Result, system: Result) -> float:
    # sacrebleu counts resampled differences strictly above the observed one, so equal
    # scores (e.g. two systems that are both perfect on the toy task) would come out at
    # p = 1 / (samples + 1), "significant"; no difference is never significant.
    return 1.0 if system.score == baseline.score else system.p_value
