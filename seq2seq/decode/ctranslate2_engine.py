"""Translating with CTranslate2: a model directory that `seq2seq export` wrote, behind the
same line handling as `Translator` (`LineTranslator`), so `seq2seq translate --engine
ctranslate2` reads and writes exactly what the PyTorch engine does.

The search is `search.loop.search`'s beam search with `stopping: beam` (CTranslate2's is the
model for it), but for a step that forbids tokens (CTranslate2 renormalises it) and the
length limit (CTranslate2 ends a hypothesis there without EOS): docs/decoding.md. It
returns no attention (`Translation.attention` is empty; word alignments need the PyTorch
engine). A target prefix is its `target_prefix`, whose pieces its scores leave out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, PositiveInt, ValidationError

from seq2seq.config import DecodeConfig, SourceTags, describe_validation_error
from seq2seq.config.decode import pytorch_only
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decode.line_translator import LineTranslator, decode_options
from seq2seq.decode.search.hypotheses import Hypothesis
from seq2seq.decode.search.loop import output_limits
from seq2seq.decode.search.prefix import Prefix, fitted_limits
from seq2seq.decode.search_request import SearchRequest
from seq2seq.errors import UserError
from seq2seq.export import SETTINGS, TOKENIZER, require_ctranslate2

_NO_ATTENTION = torch.empty(0)


class ExportSettings(BaseModel):
    """What `seq2seq.json` of an exported model holds (see seq2seq.export) and the engine
    reads."""

    decode: DecodeConfig
    max_source: PositiveInt
    tokenizer: str | None = None  # its fingerprint (None: exported before it was recorded)
    # The heads whose attention CTranslate2 averages for the coverage penalty: every head
    # of the last layer's cross-attention, as this project's search (None: exported
    # before it was recorded, with CTranslate2's default of the first head alone)
    alignment_heads: PositiveInt | None = None
    tags: list[str] = []  # the run's data.tags (none: exported before they were recorded)
    languages: list[str] = []  # its target languages (none: exported before recorded)
    targets: list[str] = []  # those with a tag (data.target_tags)

    @property
    def source_tags(self) -> SourceTags:
        return SourceTags(tuple(self.tags), tuple(self.languages), tuple(self.targets))


def _read_settings(directory: Path) -> ExportSettings:
    """The exported model's decoding settings; a missing or edited file is one line."""
    path = directory / SETTINGS
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        raise UserError(
            f"{directory} is not a model that `seq2seq export` wrote (no readable "
            f"{SETTINGS}); export the run first, or use the PyTorch engine with --run RUN"
        ) from None
    try:
        return ExportSettings.model_validate(json.loads(text))
    except ValidationError as error:
        why = describe_validation_error(error, ExportSettings).removeprefix("config error: ")
    except ValueError:
        why = "not JSON"
    raise UserError(f"{path} is not what `seq2seq export` wrote ({why}); export the run again")


class CTranslate2Translator(LineTranslator):
    def __init__(
        self,
        engine: Any,
        tokenizer: Tokenizer,
        decode: DecodeConfig,
        max_source: int | None,
        every_head: bool = True,
        tags: SourceTags | None = None,
    ) -> None:
        super().__init__(tokenizer, decode, max_source, engine.device == "cuda", tags)
        self.engine = engine
        self.every_head = every_head  # its attention averages every head (ExportSettings)

    @classmethod
    def load(
        cls, directory: str | Path, device: str = "cpu", threads: int = 0, **decode: Any
    ) -> CTranslate2Translator:
        """The exported model in `directory` on `device` (cpu, cuda or auto) with `threads`
        threads per translation (0: CTranslate2's default); `decode` as `Translator.load`."""
        require_ctranslate2()
        import ctranslate2

        directory = Path(directory)
        settings = _read_settings(directory)
        try:
            engine = ctranslate2.Translator(str(directory), device=device, intra_threads=threads)
        except (RuntimeError, ValueError) as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise UserError(
                f"CTranslate2 cannot load {directory}: {reason}; export the run again"
            ) from None
        tokenizer = _load_tokenizer(directory, settings)
        options = decode_options(settings.decode, decode)
        every_head = settings.alignment_heads is not None
        tags = settings.source_tags
        return cls(engine, tokenizer, options, settings.max_source, every_head, tags)

    def search(self, request: SearchRequest) -> list[list[Hypothesis]]:
        """CTranslate2's search (never with attention), one call per output limit in the
        batch (`_calls`): its limit is per call, and this project's search gives each
        sentence its own."""
        src_ids, decode, nbest = request.sources, request.options, request.nbest
        self._refuse_what_it_cannot(decode)
        if request.constraints or request.token_scores:
            what = "lexical constraints" if request.constraints else "token scores to give"
            raise UserError(f"CTranslate2 has no {what}; translate with the torch engine")
        prefixes = request.prefixes or [None] * len(src_ids)
        targets = _target_prefixes(self.tokenizer, prefixes)
        limits = output_limits(
            torch.tensor([len(ids) + 1 for ids in src_ids]),  # + EOS, as the model reads it
            decode.max_len_ratio,
            decode.max_len_offset,
        )
        pieces = torch.tensor([0 if p is None else len(p.ids) for p in prefixes], dtype=torch.long)
        limits = fitted_limits(limits, pieces).tolist()
        found: list[list[Hypothesis]] = [[] for _ in src_ids]
        for group in _calls(limits, alone=decode.coverage_penalty > 0):
            limit = limits[group[0]]
            results = self.engine.translate_batch(
                [self.tokenizer.src_pieces_from_ids(src_ids[i]) for i in group],
                [targets[i] for i in group],
                beam_size=decode.beam,
                num_hypotheses=nbest,
                length_penalty=decode.length_penalty,
                coverage_penalty=decode.coverage_penalty,
                min_decoding_length=decode.min_len,
                no_repeat_ngram_size=decode.no_repeat_ngram,
                max_decoding_length=limit - 1,  # tokens before EOS; ours counts EOS
                max_input_length=0,  # sources are cut to max_source already
                return_scores=True,
            )
            for i, result in zip(group, results, strict=True):
                found[i] = [
                    Hypothesis(self.tokenizer.tgt_ids_from_pieces(tokens), score, _NO_ATTENTION)
                    for tokens, score in zip(result.hypotheses, result.scores, strict=True)
                ]
        return found

    def _refuse_what_it_cannot(self, decode: DecodeConfig) -> None:
        """One line for the decoding options this engine cannot follow as the PyTorch one does."""
        if what := pytorch_only(decode):
            raise UserError(
                f"CTranslate2 has no {what}; translate the run directory with --engine torch"
            )
        if decode.coverage_penalty and not self.every_head:
            raise UserError(
                "this model was exported before its coverage penalty read every head's "
                "attention; export the run again, or translate the run directory"
            )


def _calls(limits: list[int], alone: bool) -> list[list[int]]:
    """The sentences (indices into `limits`) of each call: those of one output limit, or
    each `alone`, as CTranslate2's coverage penalty needs (in a batch, a sentence's
    penalty changes with the other sentences)."""
    if alone:
        return [[i] for i in range(len(limits))]
    return [[i for i, own in enumerate(limits) if own == limit] for limit in sorted(set(limits))]


def _target_prefixes(tokenizer: Tokenizer, prefixes: list[Prefix | None]) -> list[list[str] | None]:
    """Each source's prefix as CTranslate2's `target_prefix` takes it, its pieces; one line
    for a prefix it cannot keep to."""
    if any(prefix is not None and prefix.new_word for prefix in prefixes):
        raise UserError(
            "a prefix that ends in whitespace needs the piece after it to start a word, which "
            "CTranslate2 cannot be told; drop the whitespace at its end, or translate the run "
            "directory with --engine torch"
        )
    return [None if p is None else tokenizer.tgt_pieces_from_ids(p.ids) for p in prefixes]


def _load_tokenizer(directory: Path, settings: ExportSettings) -> Tokenizer:
    """The exported SentencePiece models, which must be the ones exported with the model."""
    if not (directory / TOKENIZER).is_dir():
        raise UserError(f"{directory} has no {TOKENIZER}/ directory; export the run again")
    tokenizer = Tokenizer.load(directory / TOKENIZER)
    if settings.tokenizer not in (None, tokenizer.fingerprint):
        raise UserError(
            f"{directory / TOKENIZER} is not the tokenizer exported with the model (fingerprint "
            f"{tokenizer.fingerprint}, not {settings.tokenizer}); export the run again"
        )
    return tokenizer
