"""A trained run directory + text in -> text out, strictly line-aligned."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from seq2seq.config import DecodeConfig, SourceTags
from seq2seq.data.padded_batches import make_batch
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decode.alignment import pharaoh, word_alignment
from seq2seq.decode.cpu_weights import int8_weights, packed_weights
from seq2seq.decode.ensemble import Ensemble, load_models
from seq2seq.decode.forced import ForcedScore, forced_translations, score_pairs
from seq2seq.decode.inputs import (
    check_flag,
    check_line,
    check_lines,
    check_load_arguments,
)
from seq2seq.decode.inspection import inspect_attention
from seq2seq.decode.line_translator import (
    AttentionMap,
    LineTranslator,
    Translation,
    decode_options,
)
from seq2seq.decode.loading import Origin
from seq2seq.decode.search.beams import SearchSettings
from seq2seq.decode.search.hypotheses import Hypothesis
from seq2seq.decode.search.loop import output_limits, search
from seq2seq.decode.search.phrases import Constraints
from seq2seq.decode.search.prefix import (
    Prefixes,
    fitted_limits,
    word_starts,
)
from seq2seq.decode.search.strategies import BatchFacts, strategy_for
from seq2seq.decode.search_request import SearchRequest
from seq2seq.decode.shortlist import Narrowing, Shortlist
from seq2seq.device import FreeCpuThreads, pick_device, use_threads
from seq2seq.errors import UserError
from seq2seq.models import Seq2Seq


class Translator(LineTranslator):
    """A trained model and its tokenizer: lines of text in, translations out (the Python
    API; `seq2seq translate`, `evaluate` and the test sets use it too).

        from seq2seq import Translator
        translator = Translator.load("runs/demo")        # the run's best checkpoint
        translator.translate(["ein kleiner Test"], beam=5)
        Translator.load(["runs/a", "runs/b"])            # an ensemble (`ensemble.Ensemble`)
    """

    def __init__(
        self,
        model: Seq2Seq,
        tokenizer: Tokenizer,
        decode: DecodeConfig,
        device: torch.device,
        max_source: int | None = None,
        origin: Origin | None = None,
        tags: SourceTags | None = None,
    ) -> None:
        super().__init__(tokenizer, decode, max_source, device.type == "cuda", tags)
        self.model = model.to(device).eval()
        self.device = device
        # set by `load`: the run and checkpoint the model comes from (an ensemble's first)
        self.origin = origin

    @classmethod
    def load(
        cls,
        run_dir: str | Path | Sequence[str | Path],
        checkpoint: str | Sequence[str] = "best",
        device: str | None = None,
        threads: int | None = None,
        int8: bool = False,
        **decode: Any,
    ) -> Translator:
        """The model of a trained run directory and its tokenizer; of several run
        directories or checkpoints, their ensemble (`ensemble.load_models` pairs them).

        `checkpoint`: best, last, step-N, a .pt file or init (the weights before the first
        update, `initial_model`). `device`: cpu, cuda or auto (default: the run's
        train.device; of an ensemble, its first run's, as for `decode`). `threads`: the CPU
        threads of this process (`torch.set_num_threads`; default: before each batch, as
        many as the CPUs that other processes leave free, `FreeCpuThreads`). On the CPU the
        linear layers' weights are prepacked for oneDNN (`packed_weights`), or with `int8`
        made int8 (`int8_weights`; with no `device`, int8 decodes on the CPU whatever the
        run's device). `decode` sets fields of the run's decode section for every call
        (beam, length_penalty, coverage_penalty, min_len, max_len_ratio, max_len_offset,
        batch_tokens, stopping, no_repeat_ngram, mbr, ...); a field given None keeps the
        run's value.
        """
        runs, checkpoints = check_load_arguments(run_dir, checkpoint, device, int8)
        if threads is not None:
            use_threads(threads)
        loaded = load_models([Path(run) for run in runs], checkpoints)
        model, cfg = loaded.model, loaded.origin.config
        decode_cfg = decode_options(cfg.decode, decode)
        target = pick_device(device or ("cpu" if int8 else cfg.train.device))
        model = _decoding_weights(model, target, int8)
        made = (loaded.tokenizer, decode_cfg, target, loaded.max_source, loaded.origin)
        translator = cls(model, *made, cfg.data.source_tags)
        if threads is None and target.type == "cpu":
            translator.cpu_threads = FreeCpuThreads()
        return translator

    def hypotheses(self, lines: list[str], **options: Any) -> list[list[Translation]]:
        with _evaluating(self.model):
            return super().hypotheses(lines, **options)

    def alignment(self, line: str, translation: Translation, head: int | None = None) -> str:
        """Pharaoh word alignment (i-j) of a line and its translation (found with attention):
        each target piece linked by the heads' mean attention, or by `head`'s."""
        if translation.attention is not None:
            _check_head(head, translation.attention)
        if not translation.tokens:
            return ""
        if translation.attention is None:
            raise UserError("word alignments need attention: call hypotheses(..., attention=True)")
        tagged = len(translation.tags)  # the tags' columns are no word's
        pairs = word_alignment(
            translation.attention[..., tagged:],
            self.attention_labels(line, translation)[0][tagged:-1],
            self.tokenizer.tgt_pieces_from_ids(translation.tokens),
            len(line.split()),
            len(translation.text.split()),
            head,
        )
        return pharaoh(pairs)

    def attention_map(self, line: str, reference: str | None = None) -> AttentionMap | None:
        """Translate one line and return its attention with the pieces that label it; None
        when the search finished no hypothesis (a model whose outputs are not finite).
        With `reference`, the attention of the model's steps over that translation instead
        (`forced`)."""
        check_line(line)
        if not line.strip():
            raise UserError("nothing to translate: the source sentence is empty")
        if reference is not None:
            check_line(reference)
            best = self.forced([line], [reference])[0]
            if best is None:
                raise UserError("the reference is empty; give the translation to draw")
        else:
            found = self.hypotheses([line])[0]
            if not found:
                return None
            best = found[0]
        src_pieces, tgt_pieces = self.attention_labels(line, best)
        return AttentionMap(src_pieces, tgt_pieces, best.attention, best.text)

    def score(
        self,
        sources: list[str],
        references: list[str],
        *,
        progress: bool = False,
        token_scores: bool = False,
        **decode: Any,
    ) -> list[ForcedScore]:
        """The model's log-probability of each reference given its line-aligned source,
        teacher-forced (`forced.score_pairs`), and of each of its pieces if `token_scores`;
        `decode` as in `translate` (length_penalty sets the normalised score's alpha,
        batch_tokens the batches)."""
        check_lines(sources, "sources")
        check_lines(references, "references")
        check_flag(token_scores, "token_scores")
        options = decode_options(self.decode, decode)
        with _evaluating(self.model):
            return score_pairs(self, sources, references, options, progress, token_scores)

    def forced(
        self, sources: list[str], references: list[str], *, progress: bool = False, **decode: Any
    ) -> list[Translation | None]:
        """Each line-aligned pair of a source and a given translation as a `Translation`:
        its pieces, their score as the search ranks, and the attention of the model's
        steps over them, fed each previous piece as a search that found it would have been
        (`forced.forced_translations`), with the tag. None where a side is blank. `decode`
        as in `translate` (tag, batch_tokens, length_penalty)."""
        check_lines(sources, "sources")
        check_lines(references, "references")
        options = decode_options(self.decode, decode)
        with _evaluating(self.model):
            return forced_translations(self, sources, references, options, progress)

    def align(
        self, sources: list[str], references: list[str], head: int | None = None, **options: Any
    ) -> list[str]:
        """The Pharaoh word alignment of each line-aligned pair of a source and a given
        translation, read from `forced`'s attention as `alignment` reads a search's (forced
        alignment; `head`: by one head's attention); "" where a side is blank. `options`
        as in `forced`."""
        found = self.forced(sources, references, **options)
        pairs = zip(sources, found, strict=True)
        return ["" if t is None else self.alignment(line, t, head) for line, t in pairs]

    def attention_diagnostics(self, sources: list[str], references: list[str]) -> dict:
        """The attention diagnostics of this model (docs/attention.md) over the
        teacher-forced pass of line-aligned `sources` and `references`: {"pairs": N,
        "skipped": [line numbers of pairs with a blank side], "sites": {module: ...}}."""
        check_lines(sources, "sources")
        check_lines(references, "references")
        if isinstance(self.model, Ensemble):
            raise UserError(
                "attention diagnostics measure one model, not an ensemble; load one run "
                "and checkpoint"
            )
        return inspect_attention(self, sources, references)

    def search(self, request: SearchRequest) -> list[list[Hypothesis]]:
        """The request's batch searched with the strategy its options ask for, from its
        prefixes if any, holding its phrases if any; with `decode.shortlist`, in the batch's
        shortlist (`shortlist.Narrowing`)."""
        if not request.options.shortlist:
            return self._search(self.model, request, self.word_starts)
        narrowing = Narrowing(self.shortlist.pieces(*_shortlist_inputs(request, self.device)))
        with narrowing.model(self.model) as model:
            starts = self.word_starts[narrowing.pieces]
            return narrowing.found(self._search(model, narrowing.request(request), starts))

    def _search(
        self, model: Seq2Seq, request: SearchRequest, word_starts: torch.Tensor
    ) -> list[list[Hypothesis]]:
        src_ids, decode, constraints = request.sources, request.options, request.constraints
        batch = make_batch(src_ids, None, list(range(len(src_ids)))).to(self.device)
        limits = output_limits(batch.src_lengths, decode.max_len_ratio, decode.max_len_offset)
        prefixes = request.prefixes
        prefixed = Prefixes.of(prefixes, word_starts) if prefixes and any(prefixes) else None
        if prefixed is not None:  # before a sampler, which draws for every step searched
            limits = fitted_limits(limits, prefixed.lengths)
        facts = BatchFacts(
            nbest=request.nbest,
            lines=request.lines if request.lines is not None else list(range(len(src_ids))),
            steps=int(limits.max()),
            device=self.device,
            constraints=Constraints.of(constraints, self.device) if constraints else None,
        )
        settings = SearchSettings(
            nbest=request.nbest,
            alpha=decode.length_penalty,
            min_length=decode.min_len,
            stopping=decode.stopping,
            no_repeat_ngram=decode.no_repeat_ngram,
            coverage_penalty=decode.coverage_penalty,
            prefixes=prefixed,
            attention=request.attention,
            token_scores=request.token_scores,
        )
        strategy = strategy_for(decode, facts)
        return search(model, batch.src, batch.src_mask, limits, strategy, settings)

    @cached_property
    def shortlist(self) -> Shortlist:
        """The run's vocabulary shortlist (`shortlist.Shortlist.of_run`), read when first asked."""
        if self.origin is None:
            raise UserError(
                "decode.shortlist is kept in the run directory; load the translator from it "
                "(Translator.load)"
            )
        table = Shortlist.of_run(self.origin.run, self.origin.config, self.tokenizer)
        return table.to(self.device)

    @cached_property
    def word_starts(self) -> torch.Tensor:
        """`prefix.word_starts` on the device: read once, when a prefix first needs it."""
        return word_starts(self.tokenizer).to(self.device)


def _decoding_weights(model: Seq2Seq, target: torch.device, int8: bool) -> Seq2Seq:
    """The model's weights as it decodes on `target`: int8 if asked (the CPU only), packed
    for oneDNN on the CPU, as they are elsewhere."""
    if int8:
        if target.type != "cpu":
            raise UserError(
                f"int8 decoding runs on the CPU only, not {target.type}; drop int8 or the device"
            )
        return int8_weights(model)
    return packed_weights(model) if target.type == "cpu" else model


def _shortlist_inputs(
    request: SearchRequest, device: torch.device
) -> tuple[torch.Tensor, list[list[int]]]:
    """What a batch's shortlist is made of: its sources' pieces (flat), and the pieces its
    prefixes and phrases force."""
    sources = torch.tensor([i for ids in request.sources for i in ids], dtype=torch.long)
    forced = [p.ids for p in request.prefixes or () if p is not None]
    forced += [phrase for phrases in request.constraints or () for phrase in phrases]
    return sources.to(device), forced


def _check_head(head: int | None, attention: torch.Tensor) -> None:
    """One line for a head that `attention` (T, [heads,] S) does not have."""
    if head is None:
        return
    heads = attention.size(1) if attention.dim() == 3 else 1  # one distribution: one head
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < heads:
        raise UserError(
            f"alignment head {head}: the attention alignments read has {heads} "
            f"head{'s' if heads > 1 else ''} (0 to {heads - 1}); give one of them"
        )


@contextmanager
def _evaluating(model: Seq2Seq) -> Iterator[None]:
    """`model` in eval mode for the block (validation lends a training model), then as it was."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
