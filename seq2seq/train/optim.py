"""Optimizers and the learning-rate schedule."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from seq2seq.config import OptimizerConfig, ScheduleConfig

_OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


def build_optimizer(
    cfg: OptimizerConfig, params: Iterable[nn.Parameter], fused: bool = False
) -> torch.optim.Optimizer:
    """Adam(W) updating all its tensors at once: foreach (on the CPU PyTorch would otherwise
    loop over them in Python, and the result is the same to the bit), or `fused` (one
    kernel on a GPU, which can skip a step on the device: `found_inf`)."""
    return _OPTIMIZERS[cfg.name](
        params,
        lr=cfg.lr,
        betas=cfg.betas,
        weight_decay=cfg.weight_decay,
        foreach=None if fused else True,
        fused=fused or None,
    )


class LearningRate:
    """Learning rate as a function of the step, times a factor that plateaus lower.

    `constant`: warm up linearly to the base rate, then hold it. `inverse_sqrt`: warm up,
    then decay with 1/sqrt(step) (Vaswani et al., 2017). `plateau`: constant, multiplied
    by `factor` whenever the validation metric fails to improve `patience` times in a row.
    `cosine`: warm up, then (Loshchilov and Hutter, 2017, without restarts)

        lr_t = min_lr + (lr - min_lr) (1 + cos(pi (t - warmup) / (last - warmup))) / 2,

    `last` being `last_step` (train.max_steps), after which it stays at min_lr.
    """

    def __init__(self, cfg: ScheduleConfig, base_lr: float, last_step: int | None = None) -> None:
        if cfg.type == "cosine" and (last_step is None or last_step <= cfg.warmup_steps):
            raise ValueError(f"a cosine schedule needs a last step after warm-up, not {last_step}")
        self.cfg = cfg
        self.base_lr = base_lr
        self.last_step = last_step
        self.scale = 1.0
        self.best: float | None = None
        self.bad = 0

    def at(self, step: int) -> float:
        warmup = self.cfg.warmup_steps
        factor = min(1.0, step / warmup) if warmup else 1.0
        if self.cfg.type == "inverse_sqrt" and step > warmup:
            factor = math.sqrt(max(warmup, 1) / step)
        if self.cfg.type == "cosine" and step > warmup:
            done = min(1.0, (step - warmup) / (self.last_step - warmup))
            low = self.cfg.min_lr / self.base_lr
            factor = low + (1 - low) * (1 + math.cos(math.pi * done)) / 2
        return max(self.base_lr * factor * self.scale, self.cfg.min_lr if step > warmup else 0.0)

    def apply(self, optimizer: torch.optim.Optimizer, step: int) -> float:
        lr = self.at(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr

    def observe(self, score: float, higher_is_better: bool) -> bool:
        """Record a validation score; True when the plateau rule lowered the rate."""
        if self.cfg.type != "plateau":
            return False
        improved = self.best is None or (
            score > self.best if higher_is_better else score < self.best
        )
        if improved:
            self.best, self.bad = score, 0
            return False
        self.bad += 1
        if self.bad <= self.cfg.patience:
            return False
        self.scale *= self.cfg.factor
        self.bad = 0
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"scale": self.scale, "best": self.best, "bad": self.bad}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scale, self.best, self.bad = state["scale"], state["best"], state["bad"]
