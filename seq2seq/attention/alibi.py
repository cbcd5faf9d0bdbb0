"""ALiBi (Press et al., 2022): positions as a bias on the energies instead of embeddings.

Head h of H adds -m_h |i - j| to the energy of query position i at key position j, the
slopes a geometric sequence: m_h = 2^(-8h/H) for h = 1..H where H is a power of 2;
otherwise those of the power of 2 below H, then every other slope of the one above, as
the paper does. A head with a large slope attends near itself, one with a small slope
far. The bias takes no parameters, and, as it depends on the distance only, it is the
same for a sentence longer than any seen in training (the paper's extrapolation).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def alibi_slopes(heads: int) -> list[float]:
    """The H slopes m_h, largest first."""

    def geometric(n: int) -> list[float]:  # n a power of 2
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    below = 2 ** int(math.floor(math.log2(heads)))
    if below == heads:
        return geometric(heads)
    return geometric(below) + geometric(2 * below)[0::2][: heads - below]


class DistanceBias(nn.Module):
    """-m_h |i - j| for the rows of an attention's batch, which interleave H heads (row
    b * H + h holds head h of item b, as `MultiHead` folds them)."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads = heads
        # Derived from the config, so not saved: checkpoints stay those of the model.
        self.register_buffer("slopes", torch.tensor(alibi_slopes(heads)), persistent=False)

    def forward(self, positions: Tensor, keys: int) -> Tensor:
        """`positions` (B * H, Tq): each query's position; the keys are at 0 .. keys - 1
        -> the bias (B * H, Tq, keys)."""
        distance = (positions.unsqueeze(-1) - torch.arange(keys, device=positions.device)).abs()
        slopes = self.slopes.repeat(positions.size(0) // self.heads)
        return distance.to(slopes.dtype) * -slopes[:, None, None]
