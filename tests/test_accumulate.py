"""`train.accumulate`: an update of several batches equals one update of them together,
steps count updates, epochs end where their batches do, and runs resume exactly."""

from __future__ import annotations

import pytest
import torch
import yaml
from cli_helpers import run_cli, train, train_straight_and_resumed
from test_cli import parameters
from test_resilience import checkpoint

from seq2seq.checkpoint import RunDir
from seq2seq.config import config_from_dict
from seq2seq.train.distributed import World
from seq2seq.train.run import build_trainer


def trainer_of(toy, directory, *overrides: str):
    config = yaml.safe_load((toy / "run.yaml").read_text())
    config["model"]["dropout"] = 0.0  # the same function of the batch in both trainers
    for override in overrides:
        field, value = override.split("=")
        section, name = field.split(".")
        config[section][name] = yaml.safe_load(value)
    return build_trainer(config_from_dict(config), RunDir(directory), World())


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_an_update_of_three_batches_is_the_update_of_them_together(toy, tmp_path, arch):
    together = trainer_of(toy, tmp_path / "one", "train.accumulate=1", f"model.arch={arch}")
    apart = trainer_of(toy, tmp_path / "three", "train.accumulate=3", f"model.arch={arch}")
    for a, b in zip(together.model.parameters(), apart.model.parameters(), strict=True):
        assert torch.equal(a, b)  # the same seed: the same initial weights
    batches = list(together.data.train.epoch(0))[:3]
    one = together.train_batches([[i for batch in batches for i in batch]])
    three = apart.train_batches(batches)
    assert one.updates == three.updates == 1 and together.progress.step == apart.progress.step
    assert three.loss == pytest.approx(one.loss, rel=1e-5)
    for (name, a), b in zip(
        together.model.named_parameters(), apart.model.parameters(), strict=True
    ):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
        # Adam's first step hardly sees the gradient's scale: compare the gradients too.
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-7, msg=name)
    # Not the update of one batch: the first alone moves the weights elsewhere.
    alone = trainer_of(toy, tmp_path / "alone", "train.accumulate=1", f"model.arch={arch}")
    alone.train_batches(batches[:1])
    moved = [
        not torch.allclose(a, b)
        for a, b in zip(alone.model.parameters(), apart.model.parameters(), strict=True)
    ]
    assert any(moved)


def test_steps_count_updates_and_an_epoch_ends_with_its_last_batches(toy, tmp_path):
    batches = len(trainer_of(toy, tmp_path / "probe").data.train.epoch(0))
    updates = -(-batches // 3)  # the epoch's last update takes the one or two left
    assert batches % 3
    run, every = tmp_path / "r", f"train.valid_every={updates}"
    assert train(toy, run, "train.accumulate=3", "train.max_epochs=2", every) == 0
    progress = checkpoint(run)["progress"]  # saved at the last validation, the epoch's end
    assert (progress["step"], progress["epoch"], progress["batch_in_epoch"]) == (
        2 * updates,
        1,
        batches,
    )
    single = tmp_path / "single"
    assert train(toy, single, "train.max_epochs=2", f"train.valid_every={batches}") == 0
    # Every pair of both epochs seen once either way: the same target tokens.
    assert checkpoint(single)["progress"]["target_tokens"] == progress["target_tokens"]


def test_an_accumulating_run_resumes_exactly(toy, tmp_path):
    sets = ("train.accumulate=3", "train.valid_every=3")
    # 10 updates of 3 batches cross the toy corpus's first epoch (20 batches) mid-update
    straight, resumed = train_straight_and_resumed(toy, tmp_path, *sets, steps=10, stop=5)
    a, b = parameters(straight), parameters(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_bad_accumulate_is_one_line(toy, capsys):
    for value, error in [("0", "greater than 0"), ("2000", "less than or equal to 1024")]:
        sets = ("--set", f"train.accumulate={value}")
        assert run_cli("config", "--config", toy / "run.yaml", *sets) == 2
        line = capsys.readouterr().err
        assert line.count("\n") == 1 and f"train.accumulate = {value}" in line and error in line
