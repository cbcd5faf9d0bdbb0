"""The config's tokenizer section (`tokenizer`: SentencePiece), the subword sampling of the
training pairs (`data.subword_sampling`), and the pieces a user may name (tags, symbols)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from seq2seq.config.section import Section

SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")  # the tokenizer's own: no symbol's
WORD_MARK = "\u2581"  # SentencePiece's "▁"


def check_symbol(value: str) -> str:
    """A piece a user names (a tag, a user symbol): some text without whitespace, not one
    of the tokenizer's special pieces."""
    if not value or any(character.isspace() for character in value):
        raise ValueError(f"{value!r} is not one piece: give some text without whitespace")
    if value in SPECIAL_PIECES:
        raise ValueError(f"{value} is a special piece of the tokenizer; name another")
    if WORD_MARK in value:  # SentencePiece's mark of a word's start, in every word
        raise ValueError(
            f"{value} holds {WORD_MARK}, which starts every word's piece; name another"
        )
    return value


Symbol = Annotated[str, AfterValidator(check_symbol)]


class SubwordSamplingConfig(Section):
    """Subword regularization: the training pairs in segmentations sampled from the
    tokenizer, not its one best (docs/training.md)."""

    alpha: float | None = Field(
        None,
        gt=0,
        le=1,
        description="null: off. unigram: the smoothing of the sampled segmentation's "
        "probability (lower: more varied; 0.1 to 0.5 are usual); bpe: BPE-dropout's chance "
        "of leaving out each merge (0.1 is usual)",
    )
    nbest: int = Field(
        -1,
        ge=-1,
        description="unigram: sample among the N best segmentations (N >= 2), -1: among all",
    )
    segmentations: int = Field(
        8,
        ge=1,
        le=1000,
        description="sampled segmentations of the training corpora, prepared once and kept; "
        "epoch e trains on number e mod this",
    )

    @field_validator("nbest")
    @classmethod
    def _more_than_one(cls, value: int) -> int:
        if value in (0, 1):
            raise ValueError("sampling among the 1 best is no sampling; give -1 (all) or 2 or more")
        return value


class TokenizerConfig(Section):
    type: Literal["sentencepiece"] = Field("sentencepiece", description="the tokenizer library")
    model_type: Literal["bpe", "unigram"] = Field("bpe", description="SentencePiece's algorithm")
    vocab_size: int = Field(8000, ge=8, description="pieces per vocabulary")
    joint: bool = Field(True, description="one vocabulary for both languages; false: one each")
    character_coverage: float = Field(
        1.0, gt=0, le=1, description="share of characters covered; rarer ones become <unk>"
    )
    byte_fallback: bool = Field(
        False,
        description="a character outside the vocabulary becomes its UTF-8 bytes (256 pieces "
        "of the vocabulary), not <unk>, and translations can write it",
    )
    user_symbols: list[Symbol] = Field(
        default_factory=list,
        description="pieces kept whole wherever they occur, never split (data.tags's tags "
        "are added here)",
    )

    @field_validator("user_symbols")
    @classmethod
    def _each_once(cls, symbols: list[str]) -> list[str]:
        twice = next((symbol for symbol in symbols if symbols.count(symbol) > 1), None)
        if twice is not None:
            raise ValueError(f"{twice} is given twice; give each symbol once")
        return symbols

    model: str | None = Field(
        None,
        description="use this SentencePiece model instead of training one: a .model file (both "
        "sides), or a directory with joint.model or src.model and tgt.model; model_type, "
        "vocab_size, character_coverage, byte_fallback and user_symbols are then not read",
    )
