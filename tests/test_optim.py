import math

import pytest
from cli_helpers import run_cli

from seq2seq.config import ScheduleConfig
from seq2seq.train.optim import LearningRate


def test_constant_with_linear_warmup():
    lr = LearningRate(ScheduleConfig(type="constant", warmup_steps=10, min_lr=0), 1e-3)
    assert lr.at(5) == pytest.approx(5e-4)
    assert lr.at(10) == lr.at(1000) == pytest.approx(1e-3)


def test_inverse_sqrt_peaks_at_warmup_then_decays():
    lr = LearningRate(ScheduleConfig(type="inverse_sqrt", warmup_steps=100, min_lr=0), 1e-3)
    assert lr.at(50) == pytest.approx(5e-4)
    assert lr.at(100) == pytest.approx(1e-3)
    assert lr.at(400) == pytest.approx(1e-3 * math.sqrt(100 / 400))


def test_plateau_lowers_the_rate_after_patience_and_keeps_its_state():
    lr = LearningRate(ScheduleConfig(type="plateau", patience=1, factor=0.5, min_lr=0), 1e-3)
    assert not lr.observe(10.0, higher_is_better=True)
    assert not lr.observe(9.0, higher_is_better=True)  # first miss: within patience
    assert lr.observe(8.0, higher_is_better=True)  # second miss: scale down
    assert lr.at(50) == pytest.approx(5e-4)
    copy = LearningRate(ScheduleConfig(type="plateau", patience=1, factor=0.5, min_lr=0), 1e-3)
    copy.load_state_dict(lr.state_dict())
    assert copy.at(50) == lr.at(50)


def test_min_lr_floor_after_warmup():
    lr = LearningRate(ScheduleConfig(type="inverse_sqrt", warmup_steps=1, min_lr=1e-4), 1e-3)
    assert lr.at(10**8) == pytest.approx(1e-4)


def test_cosine_falls_from_the_peak_to_min_lr_at_the_last_step():
    cfg = ScheduleConfig(type="cosine", warmup_steps=100, min_lr=1e-5)
    lr = LearningRate(cfg, 1e-3, last_step=1100)
    assert lr.at(50) == pytest.approx(5e-4)  # the warm-up as in every schedule
    assert lr.at(100) == pytest.approx(1e-3)
    assert lr.at(600) == pytest.approx((1e-3 + 1e-5) / 2)  # halfway down the cosine
    assert lr.at(350) == pytest.approx(1e-5 + (1e-3 - 1e-5) * (1 + math.cos(math.pi / 4)) / 2)
    assert lr.at(1100) == lr.at(5000) == pytest.approx(1e-5)
    rates = [lr.at(step) for step in range(100, 1101, 50)]
    assert rates == sorted(rates, reverse=True)
    with pytest.raises(ValueError):
        LearningRate(cfg, 1e-3, last_step=None)


def test_a_cosine_schedule_without_its_last_step_is_one_line(toy, capsys):
    sets = ["--set", "train.schedule.type=cosine", "--set", "train.schedule.warmup_steps=10"]
    for budget, shown in [([], "null"), (["--set", "train.max_steps=10"], "10")]:
        assert run_cli("config", "--config", toy / "run.yaml", *sets, *budget) == 2
        line = capsys.readouterr().err
        assert line.count("\n") == 1 and f"train.max_steps, which is {shown}" in line
    assert (
        run_cli("config", "--config", toy / "run.yaml", *sets, "--set", "train.max_steps=11") == 0
    )
