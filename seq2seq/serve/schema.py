"""What the server accepts and answers, and the limits that protect it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from seq2seq.config import DecodeConfig
from seq2seq.config.decode import plain_type


@dataclass(frozen=True)
class ServeLimits:
    """How much one request may ask and how long it may take; how many may wait."""

    max_lines: int = 64  # lines per request
    max_chars: int = 2000  # characters per line
    max_beam: int = 16
    timeout: float = 60.0  # seconds from arrival to answer, queueing included
    read_timeout: float = 10.0  # seconds a client may take to send headers, then the body
    max_queue: int = 256  # requests waiting to be decoded
    batch_lines: int = 64  # lines decoded together at most
    batch_wait: float = 0.01  # seconds a batch waits for more requests

    @property
    def max_body(self) -> int:
        """Bytes per request body: the most lines of the longest characters, and as many
        prefixes and lists of phrases, each character escaped as JSON may (12 bytes: a
        surrogate pair as two \\uXXXX; a phrase counts one more for its quotes and comma),
        and room for the rest."""
        return 3 * self.max_lines * (12 * self.max_chars + 16) + 1024


@dataclass(frozen=True)
class SearchOptions:
    """How a request's lines are decoded: what it asks per call and the decode section it
    is searched with (as its fields' items), so that only requests with equal options
    share a batch."""

    nbest: int
    attention: bool
    token_scores: bool
    fields: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, nbest: int, attention: bool, token_scores: bool, decode: DecodeConfig):
        return cls(nbest, attention, token_scores, tuple(decode.model_dump().items()))

    def decode(self) -> dict[str, Any]:
        """The decode section's fields, all of them."""
        return dict(self.fields)


def _decode_fields() -> dict[str, Any]:
    """Each field of the decode section as a request field of its type, null meaning the
    served default: its bounds and how it combines with the others are the section's to
    check (`decode_options`), as everywhere."""
    return {
        name: (plain_type(name) | None, Field(None, description=field.description))
        for name, field in DecodeConfig.model_fields.items()
    }


# `POST /translate`: lines to translate and how. Strict: a number given as a string, or a
# field the server does not know, is an error rather than a guess.
TranslateRequest = create_model(
    "TranslateRequest",
    __config__=ConfigDict(extra="forbid", strict=True),
    text=(list[str], Field(min_length=1, description="the lines to translate, in order")),
    **_decode_fields(),
    nbest=(int, Field(1, ge=1, description="hypotheses per line, best first; at most the beam")),
    attention=(bool, Field(False, description="return each hypothesis' attention weights")),
    token_scores=(
        bool,
        Field(False, description="return each hypothesis' pieces and their log-probabilities"),
    ),
    prefix=(
        list[str] | None,
        Field(
            None, description='a target prefix per line of text ("": none) its output starts with'
        ),
    ),
    constraints=(
        list[list[str]] | None,
        Field(None, description="the phrases per line of text ([]: none) its output must contain"),
    ),
)


class AttentionWeights(BaseModel):
    source: list[str]  # source pieces and </s>
    target: list[str]  # output pieces and </s>
    heads: int | None  # None: one distribution per target piece
    # [target][source], or with heads [target][head][source]
    weights: list[list[float]] | list[list[list[float]]]


class TokenScores(BaseModel):
    pieces: list[str]  # output pieces and </s>
    scores: list[float]  # the log-probability of each


class Hypothesis(BaseModel):
    text: str
    score: float  # log-probability over the length penalty (plus the coverage penalty)
    attention: AttentionWeights | None = None
    token_scores: TokenScores | None = None


class LineTranslation(BaseModel):
    text: str  # the best hypothesis; "" for a blank line
    truncated: bool  # the source was cut to the longest the model reads
    unconstrained: bool  # no hypothesis held the line's phrases: translated without them
    hypotheses: list[Hypothesis]  # best first; [] for a blank line


class TranslateResponse(BaseModel):
    translations: list[LineTranslation]  # one per input line, in input order
    beam: int
