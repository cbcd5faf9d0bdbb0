"""Diverse beam search (Vijayakumar et al., 2018): the beam's K slots in G groups of
k = K / G, each group a beam search of its own, whose candidates at step t are ranked by

    log P(y_1 .. y_t) - lambda * n_t(y_t),

n_t(v) the number of the earlier groups' k choices at step t that are token v (Hamming
diversity; the first group is plain beam search). The penalty only ranks a step's
candidates: a slot's score stays its log-probability, so hypotheses finish and are scored
as in plain beam search, and the n best different outputs of all the groups are returned
(two groups may finish the same one).

A step's 2K candidates per sentence are laid out as each group's k best (by the penalised
rank), group after group, then each group's next k: the first K are those that may
finish, as in plain search (`search._record_finished`), and each group's open slots are
the first k of its own 2k that do not end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.decode.search.strategy import BatchFacts, Candidates, Strategy

if TYPE_CHECKING:
    from seq2seq.decode.search.beams import Beams


@dataclass(frozen=True)
class DiverseBeamSearch(Strategy):
    beam: int  # K
    groups: int  # G, which divides K
    diversity: float  # lambda

    distinct: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.beam % self.groups:
            raise ValueError(f"{self.groups} groups need a beam they divide, not {self.beam}")

    @property
    def width(self) -> int:
        return self.beam

    @classmethod
    def applies(cls, decode: DecodeConfig, batch: BatchFacts) -> bool:
        return decode.beam_groups > 1

    @classmethod
    def of(cls, decode: DecodeConfig, batch: BatchFacts) -> DiverseBeamSearch:
        return cls(decode.beam, decode.beam_groups, decode.group_diversity)

    def candidates(self, beams: Beams, log_probs: Tensor, t: int) -> Candidates:
        return self.expand(beams.scores, log_probs)

    def open_slots(self, beams: Beams, top_scores: Tensor, at_eos: Tensor) -> tuple[Tensor, Tensor]:
        return self.group_slots(top_scores, at_eos)

    def expand(self, scores: Tensor, log_probs: Tensor) -> Candidates:
        """Each sentence's 2K candidates (see the module) from its rows' `scores` (A, W) and
        their `log_probs` (A*W, V, made the summed scores in place): their summed
        log-probabilities (A, 2K), and the row each extends and its token (A*2K,). Before
        the first step (W = 1) every group extends the one row."""
        active, width = scores.shape
        beam, vocab = self.beam, log_probs.size(-1)
        size = beam // self.groups
        summed = log_probs.add_(scores.view(-1, 1)).view(active, width, vocab)
        chosen = summed.new_zeros(active, vocab)  # the earlier groups' choices of each token
        best, rest = [], []
        for group in range(self.groups):
            first, rows = (group * size, size) if width == beam else (0, width)
            own = summed[:, first : first + rows].reshape(active, rows * vocab)
            penalised = own - self.diversity * chosen.repeat(1, rows)
            ranked = penalised.topk(min(2 * size, rows * vocab), dim=1).indices
            top = F.pad(own.gather(1, ranked), (0, 2 * size - ranked.size(1)), value=-torch.inf)
            ranked = F.pad(ranked, (0, 2 * size - ranked.size(1)))
            token = ranked % vocab
            chosen.scatter_add_(1, token[:, :size], torch.ones_like(top[:, :size]))
            candidates = (top, ranked // vocab + first, token)
            best.append([part[:, :size] for part in candidates])
            rest.append([part[:, size:] for part in candidates])
        top, origin, token = (
            torch.cat([b[part] for b in best] + [r[part] for r in rest], dim=1) for part in range(3)
        )
        first_row = (torch.arange(active, device=scores.device) * width).unsqueeze(1)
        return top, (origin + first_row).view(-1), token.reshape(-1)

    def group_slots(self, top_scores: Tensor, at_eos: Tensor) -> tuple[Tensor, Tensor]:
        """Each group's k slots: the first k of its 2k candidates, in their penalised rank,
        that do not end in EOS, at their summed log-probabilities (A, K; -inf: closed), and
        the candidate each one is (A*K,), an index into the step's A*2K."""
        active, width = top_scores.shape
        beam = self.beam
        size = beam // self.groups
        starts = torch.arange(self.groups, device=top_scores.device).unsqueeze(1) * size
        within = torch.arange(size, device=top_scores.device)
        columns = torch.cat([starts + within, beam + starts + within], dim=1)  # (G, 2k)
        scores = top_scores.masked_fill(at_eos, -torch.inf)[:, columns]  # (A, G, 2k)
        rank = torch.arange(2 * size, device=scores.device, dtype=scores.dtype)
        earliest = torch.where(scores.isfinite(), -rank, -torch.inf).topk(size, dim=2).indices
        picked = columns.expand(active, -1, -1).gather(2, earliest)  # (A, G, k)
        first = (torch.arange(active, device=scores.device) * width).view(-1, 1, 1)
        return scores.gather(2, earliest).view(active, beam), (picked + first).view(-1)
