"""Where training stands (`Progress`, saved in every checkpoint), the loss and speed over
a log window, and the budgets that end training (`train.max_steps`, `max_time`,
`max_epochs`, `patience`): whether one is spent, and at which update the first will be."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from seq2seq.config import TrainConfig

# A validation's fields, in the tuple that checkpoints saved before it was a record.
_TUPLE_VALIDATION = ("step", "bleu", "chrf", "loss")


@dataclass
class Progress:
    """Where training stands; plain data, saved in every checkpoint."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # the next batch of `epoch` to train on
    elapsed: float = 0.0  # seconds of training so far, over all sessions
    best: list[tuple[float, int]] = field(default_factory=list)  # (score, step), best first
    bad_validations: int = 0
    last_validation: int = -1
    skipped_updates: int = 0  # updates skipped for a non-finite loss or gradient
    skipped_in_a_row: int = 0
    target_tokens: int = 0  # trained on, over all sessions
    # Every validation's record (`ValidationResult.record`: step, each metric's score by
    # key, loss): the learning curve, across resumptions.
    validations: list[dict[str, float]] = field(default_factory=list)
    # (step, site -> diagnostics) of every validation that measured attention.
    attention: list[tuple[int, dict]] = field(default_factory=list)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Progress:
        """Progress as a checkpoint saved it (`asdict`), whichever version wrote it."""
        progress = dict(state)
        progress["best"] = [tuple(item) for item in progress["best"]]
        progress["validations"] = [
            # Checkpoints written before validations were records hold tuples.
            item if isinstance(item, dict) else dict(zip(_TUPLE_VALIDATION, item, strict=True))
            for item in progress.get("validations", [])
        ]
        return cls(**progress)


class TrainWindow:
    """Loss and throughput over the updates since the last log line."""

    def __init__(self) -> None:
        self.loss, self.tokens, self.steps, self.start = 0.0, 0, 0, time.time()
        self.alignment = 0.0  # guided alignment's term, summed as the loss

    def add(self, loss: float, tokens: int, steps: int, alignment: float = 0.0) -> None:
        """`steps` updates (skipped ones included) of summed loss per token `loss` (and
        guided alignment's term `alignment`)."""
        self.loss, self.tokens, self.steps = (
            self.loss + loss,
            self.tokens + tokens,
            self.steps + steps,
        )
        self.alignment += alignment

    @property
    def mean_loss(self) -> float:
        return self.loss / max(self.steps, 1)

    @property
    def mean_alignment(self) -> float:
        return self.alignment / max(self.steps, 1)

    @property
    def speed(self) -> float:
        """Target tokens per second (of the whole world)."""
        return self.tokens / max(time.time() - self.start, 1e-9)


# How each budget of TrainConfig is said to be spent, in the order training checks them.
_SPENT = {
    "max_steps": "train.max_steps={} reached",
    "max_time": "train.max_time={:.0f}s used",
    "max_epochs": "train.max_epochs={} done",
}


def budgets_used(progress: Progress, elapsed: float) -> dict[str, float]:
    """How much a run at `progress` (`elapsed` seconds trained) has used of each budget of
    TrainConfig, in the budget's unit: updates, seconds, finished epochs."""
    return {"max_steps": progress.step, "max_time": elapsed, "max_epochs": progress.epoch}


def budgets_reached(train: TrainConfig, progress: Progress, elapsed: float) -> dict[str, float]:
    """The budgets of `train` that a run at `progress` has used up, each with how much of it
    the run used: resumed, it stops at once. Early stopping (`patience`) aside."""
    used = budgets_used(progress, elapsed)
    return {
        name: value
        for name, value in used.items()
        if (limit := getattr(train, name)) is not None and value >= limit
    }


def budget_spent(train: TrainConfig, progress: Progress, elapsed: float) -> str | None:
    """Why training must stop now (`elapsed`: seconds trained so far), or None."""
    if train.patience is not None and progress.bad_validations >= train.patience:
        return f"no improvement of {train.metric} in {train.patience} validations"
    name = next(iter(budgets_reached(train, progress, elapsed)), None)
    return None if name is None else _SPENT[name].format(getattr(train, name))


def expected_last_step(
    train: TrainConfig,
    progress: Progress,
    elapsed: float,
    steps_per_epoch: int,
    steps_per_second: float | None,
) -> int:
    """The update at which the first budget to run out will end training, as far as can be
    told now: `max_steps`; `max_epochs` at `steps_per_epoch` updates an epoch; `max_time`
    at `steps_per_second` (None: not known yet). Early stopping cannot be foreseen."""
    epoch_start = progress.step - -(-progress.batch_in_epoch // train.accumulate)
    ends = [epoch_start + (train.max_epochs - progress.epoch) * steps_per_epoch]
    if train.max_steps is not None:
        ends.append(train.max_steps)
    if train.max_time is not None and steps_per_second:
        left = max(train.max_time - elapsed, 0.0)
        ends.append(progress.step + round(left * steps_per_second))
    return max(min(ends), progress.step)
