"""`data.filters`: the cleaning of the training corpora at `prepare`, each filter off
(null) or on with its settings (`true`: the defaults). The checks themselves are the table
in data/filters.py, in the order a pair meets them (docs/training.md#cleaning)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from seq2seq.config.section import Section


class LengthFilter(Section):
    """A side too long, or one side too long for the other (characters, before tokenizing;
    data.max_len and data.max_len_ratio count pieces, at training)."""

    max_chars: int = Field(1000, ge=1, description="the most characters a side may have")
    max_ratio: float | None = Field(
        3.0,
        ge=1,
        description="the most times the characters of the shorter side the longer may have "
        "(both counted plus 5, so that short pairs pass); null: any",
    )


class CharactersFilter(Section):
    """Text that is not the language's: letters of another script, few letters, a
    character repeated on and on."""

    min_script_share: float | None = Field(
        0.5,
        ge=0,
        le=1,
        description="the least share of a side's letters in its language's script (a language "
        "of no known script: not checked, with a warning); null: not checked",
    )
    max_other_share: float | None = Field(
        0.5,
        ge=0,
        le=1,
        description="the most share of a side's characters that are neither letters nor spaces "
        "(digits, punctuation, symbols); null: not checked",
    )
    max_repeat: int | None = Field(
        10, ge=2, description="the most times a character may follow itself; null: any"
    )


class LanguageFilter(Section):
    """Each side identified as its language (data.src, data.tgt): pycld2 screens, and what
    it does not find to be the language py3langid decides."""

    threshold: float = Field(
        0.5,
        ge=0,
        le=1,
        description="a side is dropped when identified as another language with at least this "
        "probability (py3langid's, normalised); lower: more dropped",
    )


class FiltersConfig(Section):
    """Which filters clean a training corpus at prepare (docs/training.md#cleaning)."""

    normalize: list[Literal["nfkc", "moses"]] = Field(
        default_factory=list,
        description="rewrite the text first: nfkc (Unicode NFKC), moses (Moses punctuation "
        "normalisation, sacremoses); in this order",
    )
    length: LengthFilter | None = Field(None, description="a side too long, or too unequal")
    junk: bool = Field(
        False, description="control characters, HTML tags, a side that is only a URL or e-mail"
    )
    characters: CharactersFilter | None = Field(
        None, description="letters of another script, few letters, a character repeated"
    )
    identical: bool = Field(
        False,
        description="source and target the same once case, digits, punctuation and spaces are "
        "folded (copies, untranslated text)",
    )
    language: LanguageFilter | None = Field(
        None, description="a side identified as another language than its own"
    )
    duplicates: bool = Field(
        False,
        description="a pair the same as one kept before, once case, digits, punctuation and "
        "spaces are folded: kept once",
    )

    @field_validator("length", "characters", "language", mode="before")
    @classmethod
    def _true_is_the_defaults(cls, value: Any) -> Any:
        return {} if value is True else None if value is False else value

    @classmethod
    def recommended(cls) -> FiltersConfig:
        """Every filter on with its defaults (suited to crawled corpora); no rewriting."""
        on = {name: {} for name in ("length", "characters", "language")}
        return cls(**on, junk=True, identical=True, duplicates=True)

    @classmethod
    def named(cls, name: str | None) -> FiltersConfig:
        """The settings a name stands for: `recommended`, or `none` (null too)."""
        if name == "recommended":
            return cls.recommended()
        if name in ("none", None):
            return cls()
        raise ValueError(
            f"{name!r} names no filters; give none, recommended or a mapping of filters"
        )

    @property
    def active(self) -> bool:
        """Whether it changes anything (else the corpus is read as it is)."""
        return self != FiltersConfig()
