"""`train.ema_decay`: the moving average of the weights follows its formula, is what
validation scores and checkpoints keep for translation, and resumes exactly."""

from __future__ import annotations

import pytest
import torch
from cli_helpers import train, train_straight_and_resumed
from test_resilience import checkpoint

from seq2seq import Translator
from seq2seq.train.ema import WeightAverage


def test_the_average_follows_its_recurrence_with_the_warm_up() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    average = WeightAverage(model, decay=0.9)
    expected = [p.detach().clone() for p in model.parameters()]
    for update in range(1, 30):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        model[1].running_mean.add_(1.0)
        average.update(update)
        rate = min(0.9, (1 + update) / (10 + update))
        expected = [
            rate * e + (1 - rate) * p for e, p in zip(expected, model.parameters(), strict=True)
        ]
        for mine, wanted in zip(average.averaged.parameters(), expected, strict=True):
            torch.testing.assert_close(mine, wanted)
    assert average.rate(1) == pytest.approx(2 / 11) and average.rate(200) == 0.9
    assert torch.equal(average.averaged[1].running_mean, model[1].running_mean)  # copied
    assert not any(p.requires_grad for p in average.averaged.parameters())


def test_a_negligible_decay_keeps_the_weights_themselves(toy, tmp_path) -> None:
    budget = ("train.max_steps=6", "train.valid_every=3")
    assert train(toy, tmp_path / "plain", *budget) == 0
    assert train(toy, tmp_path / "ema", *budget, "train.ema_decay=1e-9") == 0
    plain, ema = checkpoint(tmp_path / "plain"), checkpoint(tmp_path / "ema")
    assert "training_model" not in plain and ema["training_model"].keys() == ema["model"].keys()
    for name, weights in plain["model"].items():
        assert torch.equal(ema["model"][name], weights) and torch.equal(
            ema["training_model"][name], weights
        )
    assert plain["progress"]["validations"] == ema["progress"]["validations"]


def test_checkpoints_keep_the_average_and_a_run_resumes_exactly(toy, tmp_path) -> None:
    sets = ("train.ema_decay=0.5", "train.valid_every=3")
    straight, resumed = train_straight_and_resumed(toy, tmp_path, *sets, steps=8, stop=4)
    a, b = checkpoint(straight), checkpoint(resumed)
    for key in ("model", "training_model"):
        assert all(torch.equal(a[key][k], b[key][k]) for k in a[key])
    weights, averaged = a["training_model"], a["model"]
    assert any(not torch.equal(averaged[k], weights[k]) for k in weights)
    best = torch.load(straight / "checkpoints/best.pt", weights_only=True)
    assert "training_model" not in best  # what translation reads: the average alone
    translator = Translator.load(straight, checkpoint="last")
    for name, tensor in translator.model.state_dict().items():
        assert torch.equal(tensor, averaged[name])
