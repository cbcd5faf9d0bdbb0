"""What the server accepts and answers, and the limits that protect it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from seq2seq.config import DecodeConfig


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
    """How a request's lines are decoded: the decode section's fields a search has one of
    for all its lines, so that only requests with equal options share a batch."""

    beam: int
    nbest: int
    attention: bool
    token_scores: bool
    sample: bool
    temperature: float
    top_k: int
    top_p: float
    epsilon: float
    seed: int
    length_penalty: float
    coverage_penalty: float
    beam_groups: int
    group_diversity: float
    mbr: int
    mbr_utility: str
    tag: str | None

    @classmethod
    def decode_fields(cls) -> list[str]:
        """The decode section's fields among these options (the request's fields of the
        same names ask for them)."""
        return [field.name for field in fields(cls) if field.name in DecodeConfig.model_fields]

    def decode(self) -> dict[str, Any]:
        """The fields of the decode section these options set."""
        return {name: getattr(self, name) for name in self.decode_fields()}


class TranslateRequest(BaseModel):
    """`POST /translate`: lines to translate and how. Strict: a number given as a string,
    or a field the server does not know, is an error rather than a guess."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: list[str] = Field(min_length=1, description="the lines to translate, in order")
    beam: int | None = Field(None, ge=1, description="beam size; default: the run's decode.beam")
    nbest: int = Field(1, ge=1, description="hypotheses per line, best first; at most the beam")
    attention: bool = Field(False, description="return each hypothesis' attention weights")
    token_scores: bool = Field(
        False, description="return each hypothesis' pieces and their log-probabilities"
    )
    prefix: list[str] | None = Field(
        None, description='a target prefix per line of text ("": none) its output starts with'
    )
    constraints: list[list[str]] | None = Field(
        None, description="the phrases per line of text ([]: none) its output must contain"
    )
    sample: bool | None = Field(None, description="draw samples; default: the run's decode.sample")
    temperature: float | None = Field(None, description="sampling: p ** (1 / temperature)")
    top_k: int | None = Field(None, description="sampling: the k most probable pieces only")
    top_p: float | None = Field(None, description="sampling: the nucleus of mass p only")
    epsilon: float | None = Field(
        None, description="sampling: the pieces of probability at least epsilon only"
    )
    seed: int | None = Field(None, description="sampling: seeds each line's draws with its index")
    length_penalty: float | None = Field(None, description="alpha: rank by log P / length ** alpha")
    coverage_penalty: float | None = Field(None, description="beta of GNMT's coverage penalty")
    beam_groups: int | None = Field(
        None, ge=1, description="diverse beam search: this many groups, dividing the beam"
    )
    group_diversity: float | None = Field(
        None, description="with beam_groups: the penalty per earlier group's choice of a token"
    )
    mbr: int | None = Field(None, description="minimum Bayes risk among this many candidates")
    mbr_utility: str | None = Field(None, description="mbr: chrf or bleu")
    tag: str | None = Field(
        None, description="a tag of the model's (GET /info: tags) before every line; default: "
        "the run's decode.tag"
    )  # fmt: skip


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
