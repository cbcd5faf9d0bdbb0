"""The training objective, per target token, and the perplexity it implies."""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from seq2seq.data.tokenizer import PAD_ID


def token_cross_entropy(logits: Tensor, targets: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """The summed cross-entropy of `logits` (B, T, V) against `targets` (B, T), padding
    ignored, in float32 or wider whatever the logits' dtype. With label smoothing e, each
    token costs

        (1 - e) * -log p(y) + e * mean over the vocabulary v of -log p(v).
    """
    return _SmoothedCrossEntropy.apply(logits.flatten(0, 1), targets.flatten(), label_smoothing)


class _SmoothedCrossEntropy(torch.autograd.Function):
    """F.cross_entropy(reduction="sum", ignore_index=PAD_ID, label_smoothing=e) with the
    gradient written in one buffer: for a kept token of weight g,

        d loss / d logits = g * (p - e / V - (1 - e) * onehot(y)),

    computed in place over the saved log-probabilities (exp, scale, shift, one scatter).
    PyTorch's backward instead fills a zero tensor for the scatter, adds the smoothing
    term and runs log_softmax's backward: about twice the memory traffic over the
    (tokens x V) logits (measured 2.3x slower on the CPU, and 6% of a Multi30k
    Transformer's bf16 training step: docs/benchmarks.md).
    """

    @staticmethod
    def forward(ctx: FunctionCtx, logits: Tensor, targets: Tensor, smoothing: float) -> Tensor:
        dtype = torch.promote_types(logits.dtype, torch.float32)
        log_probs = torch.log_softmax(logits, dim=-1, dtype=dtype)
        kept = targets != PAD_ID
        per_token = log_probs.gather(1, targets.unsqueeze(1)).squeeze(1) * (1.0 - smoothing)
        if smoothing:
            per_token = per_token + log_probs.mean(dim=-1) * smoothing
        ctx.save_for_backward(log_probs, targets, kept)
        ctx.smoothing, ctx.logits_dtype = smoothing, logits.dtype
        return -(per_token * kept).sum()

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor) -> tuple[Tensor, None, None]:
        log_probs, targets, kept = ctx.saved_tensors
        smoothing = ctx.smoothing
        weights = (grad * kept).unsqueeze(1)  # (N, 1): zero on padding
        grad_logits = log_probs.exp_().mul_(weights)  # the saved buffer, read only here
        if smoothing:
            grad_logits.sub_(weights * (smoothing / log_probs.size(-1)))
        grad_logits.scatter_add_(1, targets.unsqueeze(1), weights * (smoothing - 1.0))
        return grad_logits.to(ctx.logits_dtype), None, None


# The attention read where it is exactly 0 (a sparse normalizer's), so that its log is finite.
_ATTENTION_FLOOR = 1e-9


def alignment_cross_entropy(attention: Tensor, gold: Tensor) -> Tensor:
    """Guided alignment's loss, summed over the batch: for each target position t, the
    cross-entropy of its attention a_t (B, T, S) against its gold distribution g_t,

        - sum over source positions j of g_tj log max(a_tj, 1e-9),

    which is 0 where g_t is (no links: EOS, padding, a pair without alignments)."""
    return -(gold * attention.float().clamp_min(_ATTENTION_FLOOR).log()).sum()


def perplexity(loss_per_token: float) -> float:
    """exp(loss), capped at exp(100): a diverging run must not overflow the log."""
    return math.exp(min(loss_per_token, 100.0))
