"""A trained run directory + text in -> text out, strictly line-aligned."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, overload

import torch
from pydantic import ValidationError
from tqdm import tqdm

from seq2seq.config import DecodeConfig, describe_validation_error
from seq2seq.data.batching import make_batch, token_batches
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, Tokenizer
from seq2seq.decode.alignment import pharaoh, word_alignment
from seq2seq.decode.cpu_weights import int8_weights, packed_weights
from seq2seq.decode.ensemble import Ensemble, load_models
from seq2seq.decode.forced import ForcedScore, score_pairs
from seq2seq.decode.inputs import (
    check_line,
    check_lines,
    check_load_arguments,
    check_nbest,
    check_option_kinds,
    check_prefixes,
)
from seq2seq.decode.inspection import inspect_attention
from seq2seq.decode.loading import Origin
from seq2seq.decode.prefix import (
    Prefix,
    Prefixes,
    fitted_limits,
    output_texts,
    read_prefixes,
    word_starts,
)
from seq2seq.decode.sampling import Sampler
from seq2seq.decode.search import Hypothesis, beam_search, output_limits
from seq2seq.device import pick_device, use_threads
from seq2seq.errors import UserError
from seq2seq.models import Seq2Seq


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
    score: float  # log-probability over the length penalty
    tokens: list[int]
    # (len(tokens) + 1, [heads,] source pieces + 1), EOS last; None unless asked for
    attention: torch.Tensor | None
    truncated: bool = False  # the source was cut to the translator's max_source pieces


# decode.batch_tokens where a config leaves it null, by device.
CPU_BATCH_TOKENS = 4_000
GPU_BATCH_TOKENS = 64_000


class LineTranslator:
    """Lines of text in, translations out, whatever computes them: blank lines give no
    hypotheses, sources are cut to `max_source` pieces (None: no limit), lines go in
    batches of `decode.batch_tokens` padded source tokens (counted once per beam, and at
    least one line per batch) in length order and come back in input order. An engine
    implements `search`."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        decode: DecodeConfig,
        max_source: int | None = None,
        on_gpu: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        self.decode = decode
        self.max_source = max_source
        self.on_gpu = on_gpu

    def batch_tokens(self, options: DecodeConfig) -> int:
        """`options.batch_tokens`, or where it is null the default of the device searching."""
        if options.batch_tokens is not None:
            return options.batch_tokens
        return GPU_BATCH_TOKENS if self.on_gpu else CPU_BATCH_TOKENS

    def search(
        self,
        src_ids: list[list[int]],
        nbest: int,
        decode: DecodeConfig,
        attention: bool = False,
        lines: list[int] | None = None,
        prefixes: list[Prefix | None] | None = None,
    ) -> list[list[Hypothesis]]:
        """The `nbest` best hypotheses of each source (piece ids, no EOS), best first, with
        their attention weights if `attention` and the engine has them; with
        `decode.sample`, `nbest` samples, drawn with the numbers of the `lines` (the
        sources' indices in the input; None: 0, 1, ...); each starting with its source's
        prefix, if `prefixes` gives one (its pieces are the hypothesis' first tokens)."""
        raise NotImplementedError

    def attention_labels(self, line: str, translation: Translation) -> tuple[list[str], list[str]]:
        """The pieces that label a translation's attention: the (cut) source's and the
        output's, each with its </s>."""
        src_pieces = [*self.tokenizer.src_pieces(line)[: self.max_source], "</s>"]
        return src_pieces, self.tokenizer.tgt_pieces_from_ids([*translation.tokens, EOS_ID])

    def alignment(self, line: str, translation: Translation) -> str:
        """Pharaoh word alignment (i-j) of a line and its translation, from attention."""
        raise UserError("word alignments need attention weights, which this engine does not give")

    @overload
    def translate(
        self,
        lines: list[str],
        *,
        nbest: Literal[1] = 1,
        progress: bool = False,
        prefixes: list[str] | None = None,
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
        **decode: Any,
    ) -> list[list[str]]: ...

    def translate(
        self,
        lines: list[str],
        *,
        nbest: int = 1,
        progress: bool = False,
        prefixes: list[str] | None = None,
        **decode: Any,
    ) -> list[str] | list[list[str]]:
        """The best translation of each line; with `nbest` N > 1, the N best of each, best
        first (fewer where the search finished fewer). `decode` sets fields of the decode
        section (beam, length_penalty, ...) for this call; `progress` shows a progress bar
        on stderr when it is a terminal; `prefixes`, one per line ("": none), are what each
        translation of their line starts with, verbatim (decode/prefix.py)."""
        found = self.hypotheses(
            lines, nbest=nbest, progress=progress, attention=False, prefixes=prefixes, **decode
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
        skip: Callable[[int], bool] | None = None,
        attention: bool = True,
        prefixes: list[str] | None = None,
        line_numbers: list[int] | None = None,
        **decode: Any,
    ) -> list[list[Translation]]:
        """The `nbest` best hypotheses of each line with their scores, tokens and, if
        `attention`, attention weights (else None: the search is faster without), best first;
        [] for a blank line (whatever its prefix). `decode`, `progress` and `prefixes` as in
        `translate`. `skip`: lines `i` for which `skip(i)` holds when their batch comes are
        not searched (they get []): how the server stops decoding a request that gave up.
        `line_numbers`: what seeds each line's samples (default: its index; the server
        numbers a line within its own request)."""
        check_lines(lines)
        check_prefixes(prefixes, len(lines))
        check_nbest(nbest)
        options = decode_options(self.decode, decode)
        if nbest > options.beam and not options.sample:
            raise UserError(f"nbest {nbest} needs a beam at least as wide; set beam={nbest}")
        given = read_prefixes(self.tokenizer, prefixes, len(lines))
        numbers = range(len(lines)) if line_numbers is None else line_numbers
        outputs: list[list[Translation]] = [[] for _ in lines]
        keep = [i for i, line in enumerate(lines) if line.strip()]
        src_ids = self.tokenizer.encode_src([lines[i] for i in keep])
        limit = self.max_source
        cut = [limit is not None and len(ids) > limit for ids in src_ids]
        src_ids = [ids[:limit] for ids in src_ids]
        width = nbest if options.sample else options.beam  # the rows of a source
        budget = max(self.batch_tokens(options) // width, 1)
        # disable=None: tqdm stays quiet where stderr is not a terminal.
        with tqdm(total=len(lines), unit="sent", disable=None if progress else True) as bar:
            bar.update(len(lines) - len(keep))  # blank lines: nothing to do
            for group in token_batches([len(s) for s in src_ids], None, budget):
                wanted = [i for i in group if skip is None or not skip(keep[i])]
                at = [keep[i] for i in wanted]  # their lines
                found = self.search(
                    [src_ids[i] for i in wanted], nbest, options, attention,
                    [numbers[j] for j in at], [given[j] for j in at],
                ) if wanted else []  # fmt: skip
                for i, line, hyps in zip(wanted, at, found, strict=True):
                    outputs[line] = self._translations(hyps, given[line], cut[i])
                bar.update(len(group))
        return outputs

    def _translations(
        self, found: list[Hypothesis], prefix: Prefix | None, cut: bool
    ) -> list[Translation]:
        """A line's hypotheses as `Translation`s, their text starting with its prefix, if any."""
        texts = output_texts(self.tokenizer, prefix, [h.tokens for h in found])
        return [
            Translation(text, h.score, h.tokens, h.attention, cut)
            for text, h in zip(texts, found, strict=True)
        ]


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
    ) -> None:
        super().__init__(tokenizer, decode, max_source, on_gpu=device.type == "cuda")
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
        threads of this process (`torch.set_num_threads`; default: leave them as they
        are). On the CPU the linear layers' weights are prepacked for oneDNN
        (`packed_weights`), or with `int8` made int8 (`int8_weights`; with no `device`, int8
        decodes on the CPU whatever the run's device). `decode` sets fields of the run's
        decode section for every call (beam, length_penalty, min_len, max_len_ratio,
        max_len_offset, batch_tokens, stopping, no_repeat_ngram); a field given None keeps
        the run's value.
        """
        runs, checkpoints = check_load_arguments(run_dir, checkpoint, device, int8)
        if threads is not None:
            use_threads(threads)
        loaded = load_models([Path(run) for run in runs], checkpoints)
        model, cfg = loaded.model, loaded.origin.config
        decode_cfg = decode_options(cfg.decode, decode)
        target = pick_device(device or ("cpu" if int8 else cfg.train.device))
        if int8:
            if target.type != "cpu":
                raise UserError(
                    f"int8 decoding runs on the CPU only, not {target.type}; drop int8 or the "
                    "device"
                )
            model = int8_weights(model)
        elif target.type == "cpu":
            model = packed_weights(model)
        return cls(model, loaded.tokenizer, decode_cfg, target, loaded.max_source, loaded.origin)

    def hypotheses(self, lines: list[str], **options: Any) -> list[list[Translation]]:
        with _evaluating(self.model):
            return super().hypotheses(lines, **options)

    def alignment(self, line: str, translation: Translation) -> str:
        """Pharaoh word alignment (i-j) of a line and its translation (found with attention)."""
        if not translation.tokens:
            return ""
        if translation.attention is None:
            raise UserError("word alignments need attention: call hypotheses(..., attention=True)")
        pairs = word_alignment(
            translation.attention,
            self.tokenizer.src_pieces(line)[: self.max_source],
            self.tokenizer.tgt_pieces_from_ids(translation.tokens),
            len(line.split()),
            len(translation.text.split()),
        )
        return pharaoh(pairs)

    def attention_map(self, line: str) -> AttentionMap | None:
        """Translate one line and return its attention with the pieces that label it; None
        when the search finished no hypothesis (a model whose outputs are not finite)."""
        check_line(line)
        if not line.strip():
            raise UserError("nothing to translate: the source sentence is empty")
        found = self.hypotheses([line])[0]
        if not found:
            return None
        best = found[0]
        src_pieces, tgt_pieces = self.attention_labels(line, best)
        return AttentionMap(src_pieces, tgt_pieces, best.attention, best.text)

    def score(
        self, sources: list[str], references: list[str], *, progress: bool = False, **decode: Any
    ) -> list[ForcedScore]:
        """The model's log-probability of each reference given its line-aligned source,
        teacher-forced (`forced.score_pairs`); `decode` as in `translate` (length_penalty
        sets the normalised score's alpha, batch_tokens the batches)."""
        check_lines(sources, "sources")
        check_lines(references, "references")
        options = decode_options(self.decode, decode)
        with _evaluating(self.model):
            return score_pairs(
                self, sources, references, options.length_penalty,
                self.batch_tokens(options), progress,
            )  # fmt: skip

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

    def search(
        self,
        src_ids: list[list[int]],
        nbest: int = 1,
        decode: DecodeConfig | None = None,
        attention: bool = False,
        lines: list[int] | None = None,
        prefixes: list[Prefix | None] | None = None,
    ) -> list[list[Hypothesis]]:
        """Beam search, or sampling, over a batch of piece ids (`decode`: default, the
        translator's), from their prefixes if any."""
        batch = make_batch(src_ids, None, list(range(len(src_ids)))).to(self.device)
        decode = decode or self.decode
        limits = output_limits(batch.src_lengths, decode.max_len_ratio, decode.max_len_offset)
        prefixed = Prefixes.of(prefixes, self.word_starts) if prefixes and any(prefixes) else None
        if prefixed is not None:  # before the sampler, which draws for every step searched
            limits = fitted_limits(limits, prefixed.lengths)
        sampler = None
        if decode.sample:
            sampler = Sampler.for_lines(
                lines if lines is not None else list(range(len(src_ids))), nbest,
                int(limits.max()), decode.seed, self.device, temperature=decode.temperature,
                top_k=decode.top_k, top_p=decode.top_p,
            )  # fmt: skip
        return beam_search(
            self.model,
            batch.src,
            batch.src_mask,
            limits,
            BOS_ID,
            EOS_ID,
            beam=nbest if sampler else decode.beam,
            nbest=nbest,
            alpha=decode.length_penalty,
            min_length=decode.min_len,
            attention=attention,
            stopping=decode.stopping,
            no_repeat_ngram=decode.no_repeat_ngram,
            sampler=sampler,
            prefixes=prefixed,
        )

    @cached_property
    def word_starts(self) -> torch.Tensor:
        """`prefix.word_starts` on the device: read once, when a prefix first needs it."""
        return word_starts(self.tokenizer).to(self.device)


@contextmanager
def _evaluating(model: Seq2Seq) -> Iterator[None]:
    """`model` in eval mode for the block (validation lends a training model), then as it was."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def decode_options(base: DecodeConfig, changes: dict[str, Any]) -> DecodeConfig:
    """`base` with the fields in `changes` that are not None (sampling without a beam given
    samples with beam 1, whatever `base`'s beam); one line for a bad one."""
    given = {k: v for k, v in changes.items() if v is not None}
    check_option_kinds(DecodeConfig, given)
    if given.get("sample") and "beam" not in given:
        given["beam"] = 1
    options = base.model_dump() | given
    try:
        return DecodeConfig.model_validate(options)
    except ValidationError as error:
        problem = describe_validation_error(error, DecodeConfig).removeprefix("config error: ")
        raise UserError(f"bad decoding option: {problem}") from None
