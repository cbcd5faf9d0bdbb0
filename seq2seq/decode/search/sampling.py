"""Sampling: each hypothesis drawn from the model's distribution, token by token, instead
of searched for (back-translation: Edunov et al., 2018).

At each step a row's next token is drawn from its log-probabilities made

    q(y) ~ p(y) ** (1 / temperature),

then kept to the tokens whose probability under q is at least `epsilon` (Hewitt et al.,
2022; the most probable always stays), to the `top_k` most probable (0: all) and then to
the nucleus, the fewest most probable whose mass under q reaches `top_p` (Holtzman et al.,
2020), renormalised. The draw inverts q's cumulative distribution at a uniform number u:
the first token whose cumulative mass exceeds u. Each line's numbers come from its own
generator, seeded with the seed and the line's index, so a line draws the same sample
whatever batch it is in; they are drawn before the search and stay on the device, so a
step reads nothing back.

N samples of a line are N rows that each extend only themselves; a sample's score is the
model's own log P / lp, as in beam search (not q's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.config.decode import SAMPLING_OPTIONS
from seq2seq.decode.search.strategy import BatchFacts, Candidates, Strategy

if TYPE_CHECKING:
    from seq2seq.decode.search.beams import Beams


def truncated(
    log_probs: Tensor, temperature: float, top_k: int, top_p: float, epsilon: float = 0.0
) -> Tensor:
    """(rows, V) log q up to a constant per row: -inf outside the kept tokens (module)."""
    logits = log_probs / temperature
    vocab = logits.size(-1)
    if epsilon > 0:
        improbable = logits.log_softmax(-1) < math.log(epsilon)
        improbable &= logits < logits.amax(-1, keepdim=True)
        logits = logits.masked_fill(improbable, float("-inf"))
    if 0 < top_k < vocab:
        kept = logits.topk(top_k, dim=-1).indices  # exactly k, ties or not
        mask = torch.ones_like(logits, dtype=torch.bool).scatter_(-1, kept, False)
        logits = logits.masked_fill(mask, float("-inf"))
    if top_p < 1.0:
        ordered, order = logits.sort(dim=-1, descending=True)
        probs = ordered.softmax(-1)
        beyond = probs.cumsum(-1) - probs >= top_p  # the more probable ones reach top_p
        outside = torch.empty_like(beyond).scatter_(-1, order, beyond)
        logits = logits.masked_fill(outside, float("-inf"))
    return logits


def draw(logits: Tensor, uniforms: Tensor) -> Tensor:
    """(rows,) the token of each row (logits (rows, V)) at which its cumulative
    distribution first exceeds its uniform number in [0, 1)."""
    cumulative = logits.softmax(-1).cumsum(-1)
    targets = (uniforms * cumulative[:, -1]).unsqueeze(1)  # the sum, not 1: float rounding
    token = torch.searchsorted(cumulative, targets, right=True).squeeze(1)
    return token.clamp_(max=logits.size(-1) - 1)  # a row with nothing left (NaN): any token


@dataclass(frozen=True)
class Sampler(Strategy):
    """The strategy that draws instead of searching: the options above and, for each line
    of the batch, its N samples' uniform numbers (B, N, steps) on the device. N samples of
    a line are its N slots, each extending only its own row."""

    uniforms: Tensor
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    epsilon: float = 0.0

    @property
    def width(self) -> int:
        return self.uniforms.size(1)

    @classmethod
    def applies(cls, decode: DecodeConfig, batch: BatchFacts) -> bool:
        return decode.sample

    @classmethod
    def of(cls, decode: DecodeConfig, batch: BatchFacts) -> Sampler:
        """`nbest` samples of each line, drawn as the options say."""
        options = {name: getattr(decode, name) for name in SAMPLING_OPTIONS}
        return cls.for_lines(
            batch.lines, batch.nbest, batch.steps, decode.seed, batch.device, **options
        )

    @classmethod
    def for_lines(
        cls, lines: list[int], samples: int, steps: int, seed: int, device: torch.device, **options
    ) -> Sampler:
        """The numbers of the lines numbered `lines` (their index in the input), each from a
        generator seeded with `seed` and its number alone."""
        # numpy's generators take the whole (seed, line) pair (torch's CPU one keeps 32 bits
        # of a seed); step by step (steps, N), so that a line's numbers for step t do not
        # depend on how many steps its batch allows.
        numbers = [
            np.random.default_rng([seed, line]).random((steps, samples), dtype=np.float32)
            for line in lines
        ]
        return cls(torch.from_numpy(np.stack(numbers)).transpose(1, 2).to(device), **options)

    def candidates(self, beams: Beams, log_probs: Tensor, t: int) -> Candidates:
        """Each of a sentence's N slots (A, N) extends its own row (the first step: the
        sentence's one row) with a drawn token, at the model's summed log-probability."""
        scores, samples = beams.scores, self.width
        active, width = scores.shape
        origin = torch.arange(active * width, device=scores.device)
        if width != samples:  # the first step: one row per sentence, N slots
            origin = origin.repeat_interleave(samples)
        log_probs = log_probs[origin] if width != samples else log_probs
        logits = truncated(log_probs, self.temperature, self.top_k, self.top_p, self.epsilon)
        token = draw(logits, self.uniforms[beams.sentences, :, t].reshape(-1))
        picked = log_probs.gather(1, token.unsqueeze(1)).squeeze(1)
        return (scores.view(-1)[origin] + picked).view(active, samples), origin, token
