"""The budgets that end training (`train.max_steps`, `max_time`, `max_epochs` and
`patience`): whether one is spent, and at which update the first of them will be."""

from __future__ import annotations

from typing import TYPE_CHECKING

from seq2seq.config import TrainConfig

if TYPE_CHECKING:
    from seq2seq.train.trainer import Progress


def budget_spent(train: TrainConfig, progress: Progress, elapsed: float) -> str | None:
    """Why training must stop now (`elapsed`: seconds trained so far), or None."""
    if train.patience is not None and progress.bad_validations >= train.patience:
        return f"no improvement of {train.metric} in {train.patience} validations"
    if train.max_steps is not None and progress.step >= train.max_steps:
        return f"train.max_steps={train.max_steps} reached"
    if train.max_time is not None and elapsed >= train.max_time:
        return f"train.max_time={train.max_time:.0f}s used"
    if progress.epoch >= train.max_epochs:
        return f"train.max_epochs={train.max_epochs} done"
    return None


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
    epoch_start = progress.step - progress.batch_in_epoch
    ends = [epoch_start + (train.max_epochs - progress.epoch) * steps_per_epoch]
    if train.max_steps is not None:
        ends.append(train.max_steps)
    if train.max_time is not None and steps_per_second:
        left = max(train.max_time - elapsed, 0.0)
        ends.append(progress.step + round(left * steps_per_second))
    return max(min(ends), progress.step)
