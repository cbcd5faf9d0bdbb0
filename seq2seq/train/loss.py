"""The training objective, per target token, and the perplexity it implies."""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor

from seq2seq.data.tokenizer import PAD_ID


def token_cross_entropy(logits: Tensor, targets: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """The summed cross-entropy of `logits` (B, T, V) against `targets` (B, T), padding
    ignored. With label smoothing e, each token costs

        (1 - e) * -log p(y) + e * mean over the vocabulary v of -log p(v).
    """
    return F.cross_entropy(
        logits.flatten(0, 1).float(),
        targets.flatten(),
        ignore_index=PAD_ID,
        label_smoothing=label_smoothing,
        reduction="sum",
    )


def perplexity(loss_per_token: float) -> float:
    """exp(loss), capped at exp(100): a diverging run must not overflow the log."""
    return math.exp(min(loss_per_token, 100.0))
