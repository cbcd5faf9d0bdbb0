"""An exponential moving average of the weights (`train.ema_decay`): what validation
scores and what checkpoints keep for translation, while training updates the weights.

After update t (counted from 1) the average moves towards the weights:

    average <- d_t average + (1 - d_t) weights,   d_t = min(decay, (1 + t) / (10 + t)),

the warm-up of d_t keeping the first updates from weighing on it for long (the start's
random weights would otherwise linger in the average for about 1 / (1 - decay) updates).
The average is a second copy of the model, so that validation and translation read it as
they read the model itself; buffers (no gradient: the REINFORCE baseline's running
value, the length ratio) are the model's own, copied.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class WeightAverage:
    """The moving average of `model`'s parameters, as a model of its own (`averaged`)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = decay
        self.averaged = copy.deepcopy(model).requires_grad_(False)
        self.sums = list(self.averaged.parameters())
        self.weights = [p.detach() for p in model.parameters()]
        self.buffers = list(zip(self.averaged.buffers(), model.buffers(), strict=True))

    def rate(self, update: int) -> float:
        """d_t of update `update` (see the module's docstring)."""
        return min(self.decay, (1 + update) / (10 + update))

    @torch.no_grad()
    def update(self, update: int) -> None:
        """Move the average towards the weights after update `update` (1-based)."""
        torch._foreach_lerp_(self.sums, self.weights, 1 - self.rate(update))
        for mine, theirs in self.buffers:
            mine.copy_(theirs)
