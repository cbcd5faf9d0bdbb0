"""The fast CPU dropout: right drop rate, unbiased, reproducible, a mask shared by the
forward and backward passes, and off in evaluation."""

from __future__ import annotations

import pytest
import torch

from seq2seq.models.dropout import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_drop_rate_and_expectation(p, dtype):
    torch.manual_seed(0)
    x = torch.ones(400, 1001, dtype=dtype)  # an odd size: the last 64-bit word is part-used
    y = dropout(x, p, training=True)
    assert y.dtype == dtype and y.shape == x.shape
    dropped = (y == 0).double().mean().item()
    assert abs(dropped - p) < 0.005
    kept = y[y != 0].double()
    assert torch.allclose(kept, kept[0].expand_as(kept))  # one scale for every kept element
    assert abs(y.double().mean().item() - 1) < 0.01


def test_every_lane_of_a_word_drops_alike():
    # Each 64-bit draw makes four mask elements; the top lane has one random bit fewer.
    torch.manual_seed(1)
    y = dropout(torch.ones(250_000, 4), 0.3, training=True)
    rates = (y == 0).double().mean(0)
    assert torch.all((rates - 0.3).abs() < 0.005), rates


def test_same_seed_same_mask_and_the_gradient_uses_it():
    x = torch.randn(37, 53, requires_grad=True)
    torch.manual_seed(5)
    y = dropout(x, 0.2, training=True)
    torch.manual_seed(5)
    assert torch.equal(dropout(x, 0.2, training=True), y)
    y.sum().backward()
    scale = (y[y != 0] / x[y != 0]).mean()
    assert torch.allclose(x.grad, (y != 0).float() * scale)


def test_evaluation_and_zero_rate_are_the_identity():
    x = torch.randn(5, 7)
    assert dropout(x, 0.0, training=True) is x
    module = Dropout(0.4).eval()
    assert module(x) is x
    assert not torch.equal(module.train()(x), x)
