"""The budgets that end training, and the progress bar's estimate of when they will."""

from __future__ import annotations

from seq2seq.config import TrainConfig
from seq2seq.train.progress import Progress, budget_spent, expected_last_step


def test_the_first_budget_to_run_out_sets_the_last_step():
    at = Progress(step=150, epoch=1, batch_in_epoch=50)  # epochs of 100 updates
    epochs = TrainConfig(max_epochs=3)
    assert expected_last_step(epochs, at, 0.0, 100, None) == 300
    steps = TrainConfig(max_epochs=3, max_steps=220)
    assert expected_last_step(steps, at, 0.0, 100, None) == 220
    # 100 s left at 0.5 updates/s: 50 more updates, before either of the others.
    timed = TrainConfig(max_epochs=3, max_steps=220, max_time=400)
    assert expected_last_step(timed, at, 300.0, 100, 0.5) == 200
    assert expected_last_step(timed, at, 300.0, 100, None) == 220  # speed not known yet
    assert expected_last_step(timed, at, 500.0, 100, 0.5) == 150  # overdue: never behind


def test_budget_spent_names_the_budget():
    assert budget_spent(TrainConfig(max_steps=10), Progress(step=10), 0.0) == (
        "train.max_steps=10 reached"
    )
    assert budget_spent(TrainConfig(max_time="1m"), Progress(step=3), 61.0) == (
        "train.max_time=60s used"
    )
    assert budget_spent(TrainConfig(max_epochs=2), Progress(epoch=2), 0.0) == (
        "train.max_epochs=2 done"
    )
    assert budget_spent(TrainConfig(patience=2), Progress(bad_validations=2), 0.0).startswith(
        "no improvement of bleu in 2 validations"
    )
    assert budget_spent(TrainConfig(), Progress(step=5), 1.0) is None
