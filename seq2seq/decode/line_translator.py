"""Lines of text in, translations out, whatever engine searches: the line-level contract
(blank lines, cut sources, token batches in length order, n-best lists, prefixes, lexical
constraints) and the decoding options a call may change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, overload

import torch
from pydantic import ValidationError
from tqdm import tqdm

from seq2seq.config import DecodeConfig, SourceTags, describe_validation_error
from seq2seq.config.decode import SAMPLING_OPTIONS, call_problem
from seq2seq.data.padded_batches import token_batches
from seq2seq.data.tokenizer import EOS_ID, Tokenizer
from seq2seq.decode.inputs import (
    check_constraints,
    check_flag,
    check_lines,
    check_nbest,
    check_option_kinds,
    check_prefixes,
)
from seq2seq.decode.search.hypotheses import Hypothesis
from seq2seq.decode.search.mbr import mbr_order
from seq2seq.decode.search.phrases import verbatim_phrases
from seq2seq.decode.search.prefix import Prefix, output_texts, read_prefixes
from seq2seq.decode.search_request import SearchRequest
from seq2seq.device import FreeCpuThreads
from seq2seq.errors import UserError


@dataclass
class AttentionMap:
    src_pieces: list[str]  # source pieces and </s>
    tgt_pieces: list[str]  # output pieces and </s>
    weights: torch.Tensor  # (target, source) or (target, heads, source)
    translation: str


@dataclass
class Translation:
    """One hypothesis for one input line."""

    text: str
    score: float  # log-probability over the length penalty (plus the coverage penalty)
    tokens: list[int]
    # (len(tokens) + 1, [heads,] source pieces + 1), EOS last; None unless asked for
    attention: torch.Tensor | None
    truncated: bool = False  # the source was cut to the translator's max_source pieces
    unconstrained: bool = False  # no hypothesis held the line's phrases: searched without
    # the log-probability of each token and of the EOS; None unless asked for
    token_scores: list[float] | None = None
    tags: tuple[str, ...] = ()  # the tags before the source (decode.tgt_lang's, decode.tag)


@dataclass(frozen=True)
class ServedLines:
    """How the server's batch, the lines of several requests, is searched: each line's
    number within its own request (what seeds its samples), and which lines to skip when
    their batch comes (`skip(i)`: line i's request gave up; they get [])."""

    numbers: list[int]
    skip: Callable[[int], bool]


# decode.batch_tokens where a config leaves it null, by device.
CPU_BATCH_TOKENS = 4_000
GPU_BATCH_TOKENS = 64_000


class LineTranslator:
    """Lines of text in, translations out, whatever computes them: blank lines give no
    hypotheses, sources are cut to `max_source` pieces (None: no limit), lines go in
    batches of `decode.batch_tokens` padded source tokens (counted once per beam, and at
    least one line per batch) in length order and come back in input order. `tags`: the
    tags the model was trained to read before a source (`decode.tgt_lang` and `decode.tag`
    choose which). An engine implements `search`."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        decode: DecodeConfig,
        max_source: int | None = None,
        on_gpu: bool = False,
        tags: SourceTags | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.decode = decode
        self.max_source = max_source
        self.on_gpu = on_gpu
        self.tags = tags or SourceTags()
        self.tags.check(decode.tag, decode.tgt_lang)  # a server's, before its first request
        # set where the engine's CPU threads follow the CPUs other work leaves free
        self.cpu_threads: FreeCpuThreads | None = None

    def follow_free_cpus(self) -> None:
        """Before a batch: fit the CPU threads to the CPUs free now (`FreeCpuThreads`)."""
        if self.cpu_threads is not None:
            self.cpu_threads.follow()

    def batch_tokens(self, options: DecodeConfig) -> int:
        """`options.batch_tokens`, or where it is null the default of the device searching."""
        if options.batch_tokens is not None:
            return options.batch_tokens
        return GPU_BATCH_TOKENS if self.on_gpu else CPU_BATCH_TOKENS

    def search(self, request: SearchRequest) -> list[list[Hypothesis]]:
        """The `request.nbest` best hypotheses of each of its sources, best first (with
        `options.sample`, that many samples), each starting with its source's prefix if it
        has one and holding its phrases if it has some (none: no hypothesis could), with
        what the request records where the engine has it."""
        raise NotImplementedError

    def attention_labels(self, line: str, translation: Translation) -> tuple[list[str], list[str]]:
        """The pieces that label a translation's attention: the (cut) source's, its tags
        first if it has some, and the output's, each with its </s>."""
        pieces = self.tokenizer.src_pieces(line)[: self._room(len(translation.tags))]
        src_pieces = [*translation.tags, *pieces, "</s>"]
        return src_pieces, self.tokenizer.tgt_pieces_from_ids([*translation.tokens, EOS_ID])

    def token_score_record(self, tokens: list[int], scores: list[float]) -> dict[str, Any]:
        """Token scores as plain data: the pieces of `tokens` (and </s>) and the
        log-probability of each (`scores`, EOS last), to 4 decimals."""
        pieces = self.tokenizer.tgt_pieces_from_ids([*tokens, EOS_ID])
        return {"pieces": pieces, "scores": [round(s, 4) for s in scores]}

    def attention_record(self, line: str, translation: Translation) -> dict[str, Any]:
        """A translation's attention as plain data: the pieces that label its columns
        (`source`) and rows (`target`), `heads` (None: one distribution per target piece)
        and `weights`, [target][source] or [target][head][source], to 4 decimals."""
        weights = translation.attention.double()
        source, target = self.attention_labels(line, translation)
        heads = weights.size(1) if weights.dim() == 3 else None
        rounded = weights.mul(1e4).round().div(1e4).tolist()
        return {"source": source, "target": target, "heads": heads, "weights": rounded}

    def alignment(self, line: str, translation: Translation, head: int | None = None) -> str:
        """Pharaoh word alignment (i-j) of a line and its translation, from attention (the
        heads' mean, or `head`'s)."""
        raise UserError("word alignments need attention weights, which this engine does not give")

    @overload
    def translate(
        self,
        lines: list[str],
        *,
        nbest: Literal[1] = 1,
        progress: bool = False,
        prefixes: list[str] | None = None,
        constraints: list[list[str]] | None = None,
        **decode: Any,
    ) -> list[str]: ...

    @overload
    def translate(
        self,
        lines: list[str],
        *,
        nbest: int,
        progress: bool = False,
        prefixes: list[str] | None = None,
        constraints: list[list[str]] | None = None,
        **decode: Any,
    ) -> list[list[str]]: ...

    def translate(
        self,
        lines: list[str],
        *,
        nbest: int = 1,
        progress: bool = False,
        prefixes: list[str] | None = None,
        constraints: list[list[str]] | None = None,
        **decode: Any,
    ) -> list[str] | list[list[str]]:
        """The best translation of each line; with `nbest` N > 1, the N best of each, best
        first (fewer where the search finished fewer). `decode` sets fields of the decode
        section (beam, length_penalty, ...) for this call; `progress` shows a progress bar
        on stderr when it is a terminal; `prefixes`, one per line ("": none), are what each
        translation of their line starts with, verbatim (decode/search/prefix.py); `constraints`,
        a list per line ([]: none), the phrases each must contain (decode/search/constraints.py:
        a line none of whose hypotheses held them is translated without them)."""
        found = self.hypotheses(
            lines,
            nbest=nbest,
            progress=progress,
            attention=False,
            prefixes=prefixes,
            constraints=constraints,
            **decode,
        )
        if nbest == 1:
            return [hyps[0].text if hyps else "" for hyps in found]
        return [[h.text for h in hyps] for hyps in found]

    def hypotheses(
        self,
        lines: list[str],
        *,
        nbest: int = 1,
        progress: bool = False,
        attention: bool = True,
        prefixes: list[str] | None = None,
        constraints: list[list[str]] | None = None,
        token_scores: bool = False,
        served: ServedLines | None = None,
        **decode: Any,
    ) -> list[list[Translation]]:
        """The `nbest` best hypotheses of each line with their scores, tokens and, if
        `attention`, attention weights (else None: the search is faster without), best first
        (with `decode.mbr`, distinct and in the order of minimum Bayes risk, `mbr`);
        [] for a blank line (whatever its prefix). `decode`, `progress`, `prefixes` and
        `constraints` as in `translate`; `token_scores`: each translation's tokens'
        log-probabilities (`Translation.token_scores`). `served`: the server's numbers of
        the lines (what seeds their samples; default: each line's index) and the lines it
        no longer wants, which are not searched."""
        options = self._options(lines, nbest, (prefixes, constraints, token_scores), decode)
        given = read_prefixes(self.tokenizer, prefixes, len(lines))
        phrases = self._phrases(constraints, len(lines))
        numbers = range(len(lines)) if served is None else served.numbers
        skip = None if served is None else served.skip
        outputs: list[list[Translation]] = [[] for _ in lines]
        keep = [i for i, line in enumerate(lines) if line.strip()]
        src_ids, cut = self.source_ids([lines[i] for i in keep], options)
        candidates = options.mbr or nbest  # what a line's search finds
        columns = [[column[j] for j in keep] for column in (numbers, given, phrases)]
        every = SearchRequest(src_ids, options, candidates, attention, token_scores, *columns)
        # disable=None: tqdm stays quiet where stderr is not a terminal.
        with tqdm(total=len(lines), unit="sent", disable=None if progress else True) as bar:
            bar.update(len(lines) - len(keep))  # blank lines: nothing to do
            budget = self._source_budget(options, candidates)
            for group in token_batches([len(s) for s in src_ids], None, budget):
                wanted = [i for i in group if skip is None or not skip(keep[i])]
                at = [keep[i] for i in wanted]  # their lines
                found = self._search_constrained(every.rows(wanted))
                for i, line, (hyps, free) in zip(wanted, at, found, strict=True):
                    held = None if free or not phrases[line] else (constraints[line], phrases[line])
                    kept = self._translations(hyps, given[line], cut[i], options, free, held)
                    outputs[line] = kept[:nbest]
                bar.update(len(group))
        return outputs

    def _source_budget(self, options: DecodeConfig, candidates: int) -> int:
        """The source pieces a batch takes: the token budget over the rows of a source."""
        width = candidates if options.sample else options.beam
        return max(self.batch_tokens(options) // width, 1)

    def source_ids(
        self, lines: list[str], options: DecodeConfig
    ) -> tuple[list[list[int]], list[bool]]:
        """The piece ids of each line as the model reads them (no EOS): the tags of
        `options` first (`source_tags`), and at most `max_source` in all; and whether each
        line was cut."""
        first = [self._tag_id(tag) for tag in self.source_tags(options)]
        src_ids = self.tokenizer.encode_src(lines)
        limit = self._room(len(first))
        cut = [limit is not None and len(ids) > limit for ids in src_ids]
        return [[*first, *ids[:limit]] for ids in src_ids], cut

    def source_tags(self, options: DecodeConfig) -> tuple[str, ...]:
        """The tags before each source translated with `options` (`SourceTags.pieces`: one
        line for a language or tag the model does not know, or none where it needs one)."""
        return tuple(self.tags.pieces(options.tag, options.tgt_lang))

    def _room(self, tags: int) -> int | None:
        """The source pieces of a line a translation reads (None: all): `max_source`, less
        one for each of its `tags`."""
        if self.max_source is None:
            return None
        return self.max_source - tags

    def _tag_id(self, tag: str) -> int:
        """The source piece id of `tag`; one line where the vocabulary splits it."""
        found = self.tokenizer.src_piece_id(tag)
        if found is None:
            raise UserError(
                f"{tag} is not a piece of this model's source vocabulary; it cannot read it"
            )
        return found

    def _options(
        self, lines: list[str], nbest: int, asked: tuple, decode: dict[str, Any]
    ) -> DecodeConfig:
        """The call's decoding options, once its arguments are checked (one line each);
        `asked`: its prefixes, constraints and token_scores."""
        prefixes, constraints, token_scores = asked
        check_lines(lines)
        check_prefixes(prefixes, len(lines))
        check_constraints(constraints, len(lines))
        check_flag(token_scores, "token_scores")
        check_nbest(nbest)
        options = decode_options(self.decode, decode)
        problem = call_problem(options, nbest, constraints is not None and any(constraints))
        if problem is not None:
            raise UserError(problem)
        return options

    def _phrases(self, constraints: list[list[str]] | None, count: int) -> list[list[list[int]]]:
        """Each line's phrases as target piece ids ([]: none)."""
        if constraints is None or not any(constraints):
            return [[] for _ in range(count)]
        return [
            self.tokenizer.encode_tgt(list(phrases)) if phrases else [] for phrases in constraints
        ]

    def _search_constrained(self, request: SearchRequest) -> list[tuple[list[Hypothesis], bool]]:
        """The request searched as a batch (no source: nothing); a source that has phrases
        none of whose hypotheses held them is searched again without them, and marked so
        (True)."""
        if not request.sources:
            return []
        self.follow_free_cpus()
        if not any(request.constraints or ()):
            return [(hyps, False) for hyps in self.search(replace(request, constraints=None))]
        found = self.search(request)
        free = [not hyps for hyps in found]
        missed = [i for i, unplaced in enumerate(free) if unplaced]
        if missed:
            again = self.search(replace(request.rows(missed), constraints=None))
            for i, hyps in zip(missed, again, strict=True):
                found[i] = hyps
        return list(zip(found, free, strict=True))

    def _translations(
        self,
        found: list[Hypothesis],
        prefix: Prefix | None,
        cut: bool,
        options: DecodeConfig,
        unconstrained: bool = False,
        held: tuple[list[str], list[list[int]]] | None = None,
    ) -> list[Translation]:
        """A line's hypotheses as `Translation`s, their text starting with its prefix, if
        any, and holding the phrases `held` (texts, piece ids) as given; with `options.mbr`,
        its distinct texts in the order of minimum Bayes risk."""
        texts = output_texts(self.tokenizer, prefix, [h.tokens for h in found])
        if held is not None:
            texts = verbatim_phrases(texts, *held, self.tokenizer)
        translations = [
            Translation(
                text,
                h.score,
                h.tokens,
                h.attention,
                cut,
                unconstrained,
                h.token_scores,
                self.source_tags(options),
            )
            for text, h in zip(texts, found, strict=True)
        ]
        if options.mbr:
            translations = [translations[i] for i in mbr_order(texts, options.mbr_utility)]
        return translations


def decode_options(base: DecodeConfig, changes: dict[str, Any]) -> DecodeConfig:
    """`base` with the fields in `changes` that are not None (sampling without a beam given
    samples with beam 1, whatever `base`'s beam, and without `base`'s groups; a search
    asked of a sampling `base` drops its sampling options not given); one line for a bad
    one."""
    given = {k: v for k, v in changes.items() if v is not None}
    check_option_kinds(DecodeConfig, given)
    if given.get("sample") and "beam" not in given:
        diversity = DecodeConfig.model_fields["group_diversity"].default
        given = {"beam": 1, "beam_groups": 1, "group_diversity": diversity} | given
    options = base.model_dump() | given
    if given.get("sample") is False:
        for name in (n for n in SAMPLING_OPTIONS if n not in given):
            options[name] = DecodeConfig.model_fields[name].default
    try:
        return DecodeConfig.model_validate(options)
    except ValidationError as error:
        problem = describe_validation_error(error, DecodeConfig).removeprefix("config error: ")
        raise UserError(f"bad decoding option: {problem}") from None
