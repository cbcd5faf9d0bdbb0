import math

import pytest

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
