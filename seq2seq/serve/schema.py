"""What the server accepts and answers, and the limits that protect it."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field


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
        """Bytes per request body: the most lines of the longest characters, each escaped
        as JSON may (12 bytes: a surrogate pair as two \\uXXXX), and room for the rest."""
        return self.max_lines * (12 * self.max_chars + 16) + 1024


class TranslateRequest(BaseModel):
    """`POST /translate`: lines to translate and how. Strict: a number given as a string,
    or a field the server does not know, is an error rather than a guess."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: list[str] = Field(min_length=1, description="the lines to translate, in order")
    beam: int | None = Field(None, ge=1, description="beam size; default: the run's decode.beam")
    nbest: int = Field(1, ge=1, description="hypotheses per line, best first; at most the beam")
    attention: bool = Field(False, description="return each hypothesis' attention weights")


class AttentionWeights(BaseModel):
    source: list[str]  # source pieces and </s>
    target: list[str]  # output pieces and </s>
    heads: int | None  # None: one distribution per target piece
    # [target][source], or with heads [target][head][source]
    weights: list[list[float]] | list[list[list[float]]]


class Hypothesis(BaseModel):
    text: str
    score: float  # log-probability over the length penalty
    attention: AttentionWeights | None = None


class LineTranslation(BaseModel):
    text: str  # the best hypothesis; "" for a blank line
    truncated: bool  # the source was cut to the longest the model reads
    hypotheses: list[Hypothesis]  # best first; [] for a blank line


class TranslateResponse(BaseModel):
    translations: list[LineTranslation]  # one per input line, in input order
    beam: int
