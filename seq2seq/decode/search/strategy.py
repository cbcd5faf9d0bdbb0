"""What a search strategy is: how each step's candidates are chosen from the open
hypotheses' continuations, and which of them the next step goes on from. The search's loop
(`loop.search`), its records and its rules (length limits, prefixes, repeat blocking,
coverage; `beams.Beams`) are the same for every strategy.

A strategy keeps K = `width` open slots per sentence. At step t, `candidates` turns the
allowed log-probabilities of the open rows into each sentence's C >= K candidates, best
first where best means anything: their summed log-probabilities (A, C), and for each the
row it extends and its token (A*C,). The search finishes those of the first K that end in
EOS; `open_slots` picks the K that go on. Plain beam search (`BeamSearch`; greedy search
is its K = 1) is the strategy the others vary: samples draw their candidates
(`sampling.Sampler`), diverse beam search ranks them group by group (`diverse`), lexical
constraints widen them and share the slots among banks (`constraints`).

A new strategy is a subclass and a line in `strategies.STRATEGIES`, which picks one from
the decode options.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decode.search.phrases import Constraints

if TYPE_CHECKING:
    from seq2seq.decode.search.beams import Beams

Candidates = tuple[Tensor, Tensor, Tensor]  # scores (A, C); origin, token (A*C,)


@dataclass(frozen=True)
class BatchFacts:
    """What a strategy may need to know of a batch beyond the options."""

    nbest: int  # the hypotheses asked of each sentence
    lines: list[int]  # each sentence's index in the input (samples are drawn per line)
    steps: int  # the most steps any sentence may take
    device: torch.device
    constraints: Constraints | None = None  # the sentences' phrases, if any


class Strategy(ABC):
    """How a search chooses its candidates and open slots (see the module)."""

    # Whether the n best read back must be different outputs (groups may find one twice).
    distinct: ClassVar[bool] = False

    @property
    @abstractmethod
    def width(self) -> int:
        """K: each sentence's open slots, the rows it decodes after the first step."""

    @classmethod
    @abstractmethod
    def applies(cls, decode: DecodeConfig, batch: BatchFacts) -> bool:
        """Whether these options and this batch ask for this strategy."""

    @classmethod
    @abstractmethod
    def of(cls, decode: DecodeConfig, batch: BatchFacts) -> Strategy:
        """The strategy for these options and this batch."""

    def forced_pieces(self) -> Tensor | None:
        """(B,) the pieces each sentence's outputs must hold, for its length limit; None: none."""
        return None

    def start(self, beams: Beams) -> None:
        """Start what the strategy records of each row, in the beams before the first step."""
        return None

    @abstractmethod
    def candidates(self, beams: Beams, log_probs: Tensor, t: int) -> Candidates:
        """Step `t`'s candidates from the rows' allowed `log_probs` (A*W, V; may be changed
        in place) and their `beams.scores` (A, W)."""

    def open_slots(
        self, beams: Beams, top_scores: Tensor, at_eos: Tensor
    ) -> tuple[Tensor, Tensor | None]:
        """The K open slots of the next step: `open_slots` of the candidates."""
        return open_slots(top_scores, at_eos, self.width)


@dataclass(frozen=True)
class BeamSearch(Strategy):
    """Each sentence's 2K best continuations of its K rows by summed log-probability: at
    most K end, one per row, so K that go on are among them. K = 1: greedy search, its one
    best continuation."""

    beam: int

    @property
    def width(self) -> int:
        return self.beam

    @classmethod
    def applies(cls, decode: DecodeConfig, batch: BatchFacts) -> bool:
        return True

    @classmethod
    def of(cls, decode: DecodeConfig, batch: BatchFacts) -> BeamSearch:
        return cls(decode.beam)

    def candidates(self, beams: Beams, log_probs: Tensor, t: int) -> Candidates:
        return best_continuations(beams.scores, log_probs, 2 * self.beam if self.beam > 1 else 1)


def best_continuations(scores: Tensor, log_probs: Tensor, count: int) -> Candidates:
    """Each sentence's `count` best continuations of its W*V (W rows each): their summed
    log-probabilities (A, count), best first, and for each candidate (A*count,) the row it
    extends and its token. `log_probs` (A*W, V) becomes the candidates' scores, in place."""
    active, width = scores.shape
    vocab = log_probs.size(-1)
    summed = log_probs.add_(scores.view(-1, 1)).view(active, width * vocab)
    top_scores, top_index = summed.topk(min(count, width * vocab), dim=1)
    if top_scores.size(1) < count:  # fewer candidates than slots: the rest stay closed
        closed = count - top_scores.size(1)
        top_scores = F.pad(top_scores, (0, closed), value=float("-inf"))
        top_index = F.pad(top_index, (0, closed))
    first_row = (torch.arange(active, device=scores.device) * width).unsqueeze(1)
    origin = (top_index // vocab + first_row).view(-1)
    token = (top_index % vocab).view(-1)
    return top_scores, origin, token


def open_slots(top_scores: Tensor, at_eos: Tensor, beam: int) -> tuple[Tensor, Tensor | None]:
    """The next step's K = `beam` slots of each sentence, from its C candidates (A, C): the
    best that do not end in EOS, at their summed log-probabilities (A, K; -inf: closed),
    and the candidate each one is (A*K,), an index into the step's A*C; None where the
    candidates are the slots (samples, greedy search)."""
    scores = top_scores.masked_fill(at_eos, float("-inf"))
    active, width = scores.shape
    if width == beam:
        return scores, None
    scores, index = scores.topk(beam, dim=1)
    first = (torch.arange(active, device=scores.device) * width).unsqueeze(1)
    return scores, (index + first).view(-1)
