"""Positions in the self-attention instead of the embeddings (`model.positions`): as a
bias on the energies of query position i at key position j, per head, before the
normalizer, whatever the attention type (ALiBi's fixed one by distance, T5's learned one
by relative position); or as a rotation of the queries and keys of the types whose
energies are their dot products (RoPE, `Rotation`).

ALiBi (Press et al., 2022): head h of H adds -m_h |i - j|, the slopes a geometric
sequence: m_h = 2^(-8h/H) for h = 1..H where H is a power of 2; otherwise those of the
power of 2 below H, then every other slope of the one above, as the paper does. A head
with a large slope attends near itself, one with a small slope far. The bias takes no
parameters and depends on the distance only, so it is the same for a sentence longer
than any seen in training (the paper's extrapolation).

T5 (Raffel et al., 2020): head h adds b_h(bucket(j - i)), a learned scalar per head and
bucket of the relative position: exact for small distances, logarithmic up to 128 (the
same bucket beyond), in both directions in the encoder and towards the past in the
decoder; one table per stack, shared by its layers, as T5 does.

Each encoding is a `Positions` subclass registered by name (`@register_positions`), which
says what the Transformer builds for it (`bias`, `rotation`, or sinusoids `in_embeddings`)
and what the config and the export ask of it (`problem`, `exportable`).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn

from seq2seq.config import POSITION_TYPES, ModelConfig


def frequencies(dim: int) -> Tensor:
    """theta_k = 10000^(-2k/d) for k = 0 .. d/2 - 1: the rates of the sinusoidal positions
    (Vaswani et al.) and of RoPE's rotations."""
    return torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))


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


def relative_buckets(relative: Tensor, bidirectional: bool, buckets: int, far: int) -> Tensor:
    """T5's bucket of each relative position (key minus query): exact up to half the
    buckets of a direction, logarithmic beyond, up to `far`; both directions (the
    encoder) or the past only (the decoder, whose future is masked anyway)."""
    offset = torch.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        offset = (relative > 0).long() * buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)
    exact = buckets // 2
    ratio = distance.float().clamp(min=1) / exact
    steps = (torch.log(ratio) / math.log(far / exact) * (buckets - exact)).long()
    logarithmic = (exact + steps).clamp(max=buckets - 1)
    return offset + torch.where(distance < exact, distance, logarithmic)


class RelativeBias(nn.Module):
    """A learned bias per head and relative-position bucket (Raffel et al., 2020: T5),
    one table shared by the self-attention of every layer of a stack, for the rows of an
    attention's batch, which interleave H heads."""

    def __init__(self, heads: int, bidirectional: bool, buckets: int = 32, far: int = 128) -> None:
        super().__init__()
        self.heads, self.bidirectional, self.buckets, self.far = heads, bidirectional, buckets, far
        self.table = nn.Embedding(buckets, heads)
        nn.init.zeros_(self.table.weight)  # starts as no bias: positions are learned

    def forward(self, positions: Tensor, keys: int) -> Tensor:
        """`positions` (B * H, Tq): each query's position; keys at 0 .. keys - 1 -> the bias
        (B * H, Tq, keys)."""
        queries = positions[:: self.heads]  # the same for every head of an item
        relative = torch.arange(keys, device=positions.device) - queries.unsqueeze(-1)
        bucket = relative_buckets(relative, self.bidirectional, self.buckets, self.far)
        bias = self.table(bucket).permute(0, 3, 1, 2)  # (B, H, Tq, Tk)
        return bias.flatten(0, 1)


# What an attention module adds to its energies by position (`Attention.position_bias`).
PositionBias = DistanceBias | RelativeBias


class Rotation(nn.Module):
    """RoPE (Su et al., 2021): the query at position i and the key at position j rotated,
    each pair of dimensions (2k, 2k + 1) by the angle i theta_k (j theta_k), theta_k =
    10000^(-2k/d), so that their dot product depends on j - i only. For the types whose
    energies are dot products of the query and the prepared key."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        if dim % 2:
            raise ValueError(f"rotary positions rotate pairs of dimensions; {dim} is odd")
        self.register_buffer("rates", frequencies(dim), persistent=False)

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        """`x` (..., T, d) at `positions` (..., T) -> x rotated, in x's dtype."""
        angles = positions.unsqueeze(-1).to(self.rates.dtype) * self.rates  # (..., T, d/2)
        cos, sin = angles.cos(), angles.sin()
        even, odd = x[..., 0::2].float(), x[..., 1::2].float()
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
        return rotated.flatten(-2).to(x.dtype)


class Positions:
    """A positional encoding (`model.positions`): the base reads positions in the
    self-attention with neither a bias nor a rotation; a subclass says what it adds."""

    in_embeddings: ClassVar[bool] = False  # sinusoids added to the embeddings instead
    exportable: ClassVar[bool] = False  # CTranslate2 adds sinusoids, and nothing else

    @classmethod
    def problem(cls, model: ModelConfig) -> str | None:
        """Why `model` cannot read positions this way, or None."""
        return None

    @classmethod
    def bias(cls, heads: int, bidirectional: bool) -> PositionBias | None:
        """What a stack's self-attention adds to its energies (one module per stack)."""
        return None

    @classmethod
    def rotation(cls, head_dim: int) -> Rotation | None:
        """How the self-attention rotates its queries and keys."""
        return None


register_positions = POSITION_TYPES.add


def position_type(name: str) -> type[Positions]:
    """The encoding registered as `name` (names are validated by the config)."""
    return POSITION_TYPES[name]  # type: ignore[return-value]


@register_positions("sinusoidal")
class Sinusoidal(Positions):
    """Sinusoids added to the embeddings (Vaswani et al.)."""

    in_embeddings = exportable = True


@register_positions("alibi")
class ALiBi(Positions):
    @classmethod
    def bias(cls, heads: int, bidirectional: bool) -> PositionBias:
        return DistanceBias(heads)


@register_positions("relative")
class T5Relative(Positions):
    @classmethod
    def bias(cls, heads: int, bidirectional: bool) -> PositionBias:
        return RelativeBias(heads, bidirectional)


@register_positions("rotary")
class RoPE(Positions):
    # The self-attention types whose energies are dot products of the query and the
    # prepared key, which it rotates.
    ROTATABLE: ClassVar[frozenset[str]] = frozenset(
        {"dot", "scaled-dot", "multihead", "cosine", "general"}
    )

    @classmethod
    def problem(cls, model: ModelConfig) -> str | None:
        kind = model.self_attention.type
        if kind not in cls.ROTATABLE:
            return (
                f"positions=rotary rotates queries and keys that a dot product compares; "
                f"self_attention.type {kind} does not: use one of "
                f"{', '.join(sorted(cls.ROTATABLE))}, or positions alibi or relative"
            )
        heads = model.heads(model.self_attention)
        head = model.hidden_dim // heads
        if head % 2 and not model.hidden_dim % heads:  # (heads that do not divide: the schema)
            return (
                f"positions=rotary rotates pairs of dimensions; a self-attention head has "
                f"{head} (hidden_dim / heads): make it even"
            )
        return None

    @classmethod
    def rotation(cls, head_dim: int) -> Rotation:
        return Rotation(head_dim)
