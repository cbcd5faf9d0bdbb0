"""The decoder's LSTM with written-out steps is PyTorch's LSTM, forward and backward."""

import pytest
import torch
from torch import nn

from seq2seq.models.recurrent import StepLSTM


def twins(layers: int, bias: bool, batch_first: bool, dropout: float = 0.0):
    torch.manual_seed(0)
    shape = dict(num_layers=layers, bias=bias, batch_first=batch_first, dropout=dropout)
    lstm, step_lstm = nn.LSTM(6, 8, **shape), StepLSTM(6, 8, **shape)
    step_lstm.load_state_dict(lstm.state_dict())
    return lstm, step_lstm


def gradients(module: nn.Module, step: torch.Tensor, state) -> list[torch.Tensor]:
    module.zero_grad()
    out, (hidden, cell) = module(step, state)
    (out.square().sum() + hidden.sum() + 2 * cell.sum()).backward()
    return [p.grad.clone() for p in module.parameters()]


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
def test_a_written_out_step_is_the_lstms_step_with_its_gradients(layers, bias, batch_first):
    lstm, step_lstm = twins(layers, bias, batch_first)
    step = torch.randn((5, 1, 6) if batch_first else (1, 5, 6))
    state = (torch.randn(layers, 5, 8), torch.randn(layers, 5, 8))
    assert step_lstm.runs_steps(step, state)
    for got, want in zip(step_lstm(step, state), lstm(step, state), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert step_lstm(step, state)[0].grad_fn.name() == "UnsqueezeBackward0"  # written out
    found, expected = gradients(step_lstm, step, state), gradients(lstm, step, state)
    for got, want in zip(found, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_sequences_and_dropout_between_layers_take_the_lstms_own_path():
    lstm, step_lstm = twins(2, True, True, dropout=0.5)
    sequence, step = torch.randn(3, 4, 6), torch.randn(3, 1, 6)
    state = (torch.zeros(2, 3, 8), torch.zeros(2, 3, 8))
    assert not step_lstm.runs_steps(step, state)  # training: dropout between layers
    assert not step_lstm.runs_steps(step, None)
    lstm.eval(), step_lstm.eval()
    assert not step_lstm.runs_steps(sequence, state)
    assert torch.equal(step_lstm(sequence, state)[0], lstm(sequence, state)[0])
    assert step_lstm.runs_steps(step, state)  # evaluation: no dropout, so written out


def test_under_bf16_autocast_a_step_stays_near_the_float32_one():
    lstm, step_lstm = twins(1, True, True)
    step, state = torch.randn(5, 1, 6), (torch.randn(1, 5, 8), torch.randn(1, 5, 8))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = step_lstm(step, state)[0]
    assert low.dtype == torch.float32  # the cell state stays float32: h' = o tanh(c')
    torch.testing.assert_close(low, lstm(step, state)[0], rtol=0.05, atol=0.02)
