"""The training loss: PyTorch's label-smoothed cross-entropy, value and gradient, with a
backward of its own."""

import pytest
import torch
import torch.nn.functional as F

from seq2seq.data.tokenizer import PAD_ID
from seq2seq.train.loss import token_cross_entropy


def _batch(dtype: torch.dtype, vocab: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 7, vocab, generator=generator) * 4).to(dtype)
    targets = torch.randint(PAD_ID + 1, vocab, (3, 7), generator=generator)
    targets[0, 5:] = PAD_ID  # padding at the end of two rows
    targets[2, 3:] = PAD_ID
    return logits, targets


def _reference(logits: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    return F.cross_entropy(
        logits.flatten(0, 1).float(),
        targets.flatten(),
        ignore_index=PAD_ID,
        label_smoothing=smoothing,
        reduction="sum",
    )


def _loss_and_grad(function, logits, targets, smoothing):
    leaf = logits.clone().requires_grad_()
    loss = function(leaf, targets, smoothing)
    (loss * 0.37).backward()  # an upstream gradient other than 1
    return loss.detach(), leaf.grad


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_loss_and_gradient_equal_pytorchs_cross_entropy(smoothing: float) -> None:
    logits, targets = _batch(torch.float32)
    loss, grad = _loss_and_grad(token_cross_entropy, logits, targets, smoothing)
    expected_loss, expected_grad = _loss_and_grad(_reference, logits, targets, smoothing)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-6, atol=0)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-7)
    assert grad[0, 5:].abs().sum() == 0 and grad[2, 3:].abs().sum() == 0  # padding


def test_bf16_logits_get_a_float32_loss_and_a_bf16_gradient() -> None:
    logits, targets = _batch(torch.bfloat16)
    loss, grad = _loss_and_grad(token_cross_entropy, logits, targets, 0.1)
    expected_loss, expected_grad = _loss_and_grad(_reference, logits, targets, 0.1)
    assert loss.dtype == torch.float32 and grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss, expected_loss, rtol=1e-6, atol=0)
    torch.testing.assert_close(grad, expected_grad)  # bf16's tolerance: one rounding apart


def test_gradient_equals_central_differences_in_float64() -> None:
    logits, targets = _batch(torch.float64, vocab=11)
    _, grad = _loss_and_grad(token_cross_entropy, logits, targets, 0.2)
    step, numeric = 1e-6, torch.empty_like(logits)
    for i in range(logits.numel()):
        shifted = [logits.flatten().clone() for _ in range(2)]
        shifted[0][i] += step
        shifted[1][i] -= step
        up, down = (token_cross_entropy(x.view_as(logits), targets, 0.2) for x in shifted)
        numeric.view(-1)[i] = 0.37 * (up - down) / (2 * step)
    torch.testing.assert_close(grad, numeric, rtol=1e-6, atol=1e-8)


def test_a_second_backward_through_the_same_graph_is_refused() -> None:
    logits, targets = _batch(torch.float32)
    leaf = logits.requires_grad_()
    loss = token_cross_entropy(leaf, targets, 0.1)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="inplace"):  # the buffer it reused is spent
        loss.backward()


def test_non_finite_logits_give_a_non_finite_loss() -> None:
    logits, targets = _batch(torch.float32)
    logits[1, 2, 4] = float("nan")
    assert not torch.isfinite(token_cross_entropy(logits, targets, 0.1))
