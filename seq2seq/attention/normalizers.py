"""Normalizers: what turns an attention type's masked energies into weights.

Every type's energies go through one of these (`model.attention.normalizer`), separate
from the score. Each maps a row of energies z, -inf at the keys a query may not see, onto
the probability simplex, so masked keys get exactly 0 and the weights sum to 1:

    softmax    w = exp(z) / sum exp(z)                     (never exactly 0 at a real key)
    sparsemax  w = argmin_{p in simplex} ||p - z||^2 = [z - tau]_+        (Martins, 2016)
    entmax15   w = [z/2 - tau]_+^2                   alpha-entmax at alpha = 1.5
    entmax     w = [(alpha - 1) z - tau]_+^(1 / (alpha - 1)),  alpha = 1 + sigmoid(s)
                                                        (Peters et al., 2019; s learned)
    hard       the softmax, as the distribution that hard attention chooses positions
               from (`hard.py`: the type's `choice`, after any shaping of the weights)

tau is the threshold that makes the weights sum to 1. alpha-entmax is softmax as alpha
goes to 1 and sparsemax at alpha = 2; the learned alpha stays inside (1, 2) and starts
at 1.5 (s = 0), one per head (rows b * H + h of the folded batch) or one per module.
The sparse ones compute in float32 (also under autocast, as softmax does there), with
the `entmax` package's exact sorts (sparsemax, entmax15) and bisection (entmax).
"""

from __future__ import annotations

from typing import ClassVar

import entmax
import torch
from torch import Tensor, nn

from seq2seq.config import NORMALIZERS, AttentionConfig


class Normalizer(nn.Module):
    """Energies (rows, Tq, Tk), -inf where masked -> weights of the same shape. A new one
    is a subclass registered with `@NORMALIZERS.add(name)`: the config accepts the name."""

    # The AttentionConfig fields it alone reads (the config refuses them with the others).
    options: ClassVar[frozenset[str]] = frozenset()

    # Whether PyTorch's fused attention computes the same weights (softmax only).
    fusable: ClassVar[bool] = False
    # Whether it gives real keys exactly 0 (all but softmax): diagnostics count them.
    sparse: ClassVar[bool] = True
    # Whether a CUDA graph can capture it: nothing in its forward or backward reads
    # tensor values on the host.
    graph_safe: ClassVar[bool] = True

    def __init__(self, cfg: AttentionConfig) -> None:
        super().__init__()

    def learned_scales(self) -> dict[str, Tensor]:
        """Its learned scalars (entmax: alpha), for diagnostics."""
        return {}


def _at_least_float32(energies: Tensor) -> Tensor:
    """bf16 and fp16 energies (autocast) in float32; float32 and float64 as they are."""
    return energies.to(torch.promote_types(energies.dtype, torch.float32))


@NORMALIZERS.add("softmax")
class Softmax(Normalizer):
    fusable = True
    sparse = False

    def forward(self, energies: Tensor) -> Tensor:
        return torch.softmax(energies, dim=-1)


@NORMALIZERS.add("sparsemax")
class Sparsemax(Normalizer):
    # Its backward zeroes gradients through a boolean index, which may read the mask on
    # the host: a captured update could fail, so the model trains op by op instead.
    graph_safe = False

    def forward(self, energies: Tensor) -> Tensor:
        return entmax.sparsemax(_at_least_float32(energies), dim=-1)


@NORMALIZERS.add("entmax15")
class Entmax15(Normalizer):
    def forward(self, energies: Tensor) -> Tensor:
        return entmax.entmax15(_at_least_float32(energies), dim=-1)


@NORMALIZERS.add("entmax")
class LearnedEntmax(Normalizer):
    """alpha-entmax, alpha = 1 + sigmoid(s) per head (or per module), s learned from 0."""

    options = frozenset({"alpha_per_head"})

    def __init__(self, cfg: AttentionConfig) -> None:
        super().__init__(cfg)
        self.groups = (cfg.heads or 1) if cfg.alpha_per_head else 1
        self.alpha_logit = nn.Parameter(torch.zeros(self.groups))

    def alpha(self) -> Tensor:
        """(groups,) alpha in (1, 2)."""
        return 1 + torch.sigmoid(self.alpha_logit)

    def forward(self, energies: Tensor) -> Tensor:
        energies = _at_least_float32(energies)
        rows = energies.size(0)
        alpha = self.alpha().to(energies.dtype).repeat(rows // self.groups).view(rows, 1, 1)
        return entmax.entmax_bisect(energies, alpha, dim=-1)

    def learned_scales(self) -> dict[str, Tensor]:
        return {"alpha": self.alpha()}


@NORMALIZERS.add("hard")
class HardChoice(Softmax):
    """The softmax, as the distribution hard attention chooses positions from (hard.py)."""

    options = frozenset({"hard"})


def build_normalizer(cfg: AttentionConfig) -> Normalizer:
    """The normalizer of `cfg`; `cfg.heads` is how many heads its rows interleave."""
    return NORMALIZERS.registered()[cfg.normalizer](cfg)  # type: ignore[return-value]
