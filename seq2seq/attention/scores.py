"""Score functions: each attention type is its energy formula and nothing else."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.attention.base import (
    Attention,
    AttentionOutput,
    fused_attention,
    register_attention,
)
from seq2seq.config import AttentionConfig
from seq2seq.errors import UserError


@register_attention("dot")
class DotAttention(Attention):
    """Luong dot: q . k (query and key sizes must match), times a temperature g if it has one.

    g multiplies the energies: g q . k. It is learned as exp(s), s starting at log g0 (so g
    stays positive), or fixed at g0 (a buffer, not a parameter: training cannot move it).
    g0 is the option `temperature`, else the type's `default_temperature`; without either,
    there is no g and nothing is multiplied.
    """

    options = frozenset({"temperature", "learn_temperature"})
    default_temperature: ClassVar[float | None] = None
    log_scale: Tensor | None  # s, g = exp(s); None: no temperature

    def __init__(self, query_dim: int, key_dim: int, cfg: AttentionConfig) -> None:
        super().__init__(query_dim, key_dim, cfg)
        if query_dim != key_dim:
            raise ValueError(
                f"{self.name} attention needs query_dim == key_dim, got {query_dim}, {key_dim}"
            )
        initial = self.default_temperature if cfg.temperature is None else cfg.temperature
        if initial is None:
            self.log_scale = None
        elif cfg.learn_temperature:
            self.log_scale = nn.Parameter(torch.tensor(math.log(initial)))
        else:
            self.register_buffer("log_scale", torch.tensor(math.log(initial)))

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        energies = torch.bmm(query, keys.transpose(1, 2))
        return energies if self.log_scale is None else self.log_scale.exp() * energies

    def learned_scales(self) -> dict[str, Tensor]:
        return {} if self.log_scale is None else {"temperature": self.log_scale.exp()}

    def tempered(self, query: Tensor) -> Tensor:
        """g q: the query whose plain dot products are the energies g q . k."""
        return query if self.log_scale is None else self.log_scale.exp() * query


@register_attention("scaled-dot")
class ScaledDotAttention(DotAttention):
    """Scaled dot product (Vaswani et al., 2017): q . k / sqrt(d), times g if it has one.

    Without weights asked for and with the softmax, it runs PyTorch's fused attention
    (`fused_attention`) (on g q, which gives the same energies).
    """

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return super().score(query, keys) / math.sqrt(keys.size(-1))

    def attend(
        self,
        query: Tensor,
        prepared_keys: Tensor,
        prepared_values: Tensor,
        mask: Tensor,
        positions: Tensor | None = None,
        need_weights: bool = True,
    ) -> AttentionOutput:
        if need_weights or not self.fusable:
            return super().attend(
                query, prepared_keys, prepared_values, mask, positions, need_weights
            )
        if self.recorder is not None:
            self.recorder.observe(self, query, prepared_keys, mask, positions)
        query, keys = self.rotated(self.tempered(query), prepared_keys, positions)
        allowed = self.fused_mask(mask, positions, keys.size(1), query.dtype)
        context = fused_attention(query, keys, prepared_values, allowed, self.training_dropout)
        return AttentionOutput(context, None)


@register_attention("cosine")
class CosineAttention(DotAttention):
    """Cosine similarity times an inverse temperature: g * cos(q, k), g = 10 learned by default.

    cos(q, k) alone is bounded to [-1, 1], so a plain softmax over it stays nearly flat
    (at most e^2 between two keys); g, by default learned as exp(s) with s initialised to
    log(10), lets the weights sharpen. The energies lie in [-g, g].
    """

    default_temperature: ClassVar[float | None] = 10.0

    def prepare_keys(self, keys: Tensor) -> Tensor:
        return F.normalize(keys, dim=-1)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return super().score(F.normalize(query, dim=-1), keys)

    def scored_inputs(self, query: Tensor, prepared_keys: Tensor) -> tuple[Tensor, Tensor]:
        return F.normalize(query, dim=-1), prepared_keys


@register_attention("general")
class GeneralAttention(Attention):
    """Luong general (bilinear): q^T W k."""

    def __init__(self, query_dim: int, key_dim: int, cfg: AttentionConfig) -> None:
        super().__init__(query_dim, key_dim, cfg)
        self.proj = nn.Linear(key_dim, query_dim, bias=False)

    def prepare_keys(self, keys: Tensor) -> Tensor:
        return self.proj(keys)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(query, keys.transpose(1, 2))


@register_attention("concat")
class ConcatAttention(Attention):
    """Luong concat: v^T tanh(W [q; k]) = v^T tanh(W1 q + W2 k); attends after the cell."""

    def __init__(self, query_dim: int, key_dim: int, cfg: AttentionConfig) -> None:
        super().__init__(query_dim, key_dim, cfg)
        self.query_proj = nn.Linear(query_dim, key_dim, bias=False)
        self.key_proj = nn.Linear(key_dim, key_dim, bias=False)
        self.v = nn.Linear(key_dim, 1, bias=False)

    def prepare_keys(self, keys: Tensor) -> Tensor:
        return self.key_proj(keys)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        hidden = torch.tanh(self.query_proj(query).unsqueeze(2) + keys.unsqueeze(1))
        return self.v(hidden).squeeze(-1)

    def scored_inputs(self, query: Tensor, prepared_keys: Tensor) -> tuple[Tensor, Tensor]:
        return self.query_proj(query), prepared_keys

    def learned_scales(self) -> dict[str, Tensor]:
        # |energy| <= ||v||_1, since tanh is bounded by 1: v sets the energies' scale.
        return {"v_norm": self.v.weight.norm()}


@register_attention("bahdanau")
class BahdanauAttention(ConcatAttention):
    """Bahdanau additive: v^T tanh(W1 q + W2 k), the concat energy; attends before the cell."""

    attends_before_cell = True


@register_attention("location")
class LocationAttention(Attention):
    """Luong location: energies W_a q over source positions, sliced to the source length.

    It never looks at the keys; the base class masks padding and so renormalises over
    each source's real length.
    """

    content_based = False
    options = frozenset({"max_source_len"})

    def __init__(self, query_dim: int, key_dim: int, cfg: AttentionConfig) -> None:
        super().__init__(query_dim, key_dim, cfg)
        self.proj = nn.Linear(query_dim, cfg.max_source_len)

    @classmethod
    def max_source_positions(cls, cfg: AttentionConfig) -> int:
        return cfg.max_source_len

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        length, limit = keys.size(1), self.proj.out_features
        if length > limit:
            raise UserError(
                f"location attention got a source of {length} positions but scores at most "
                f"{limit}; raise model.attention.max_source_len or shorten the input"
            )
        return self.proj(query)[..., :length]

    def scored_inputs(self, query: Tensor, prepared_keys: Tensor) -> tuple[Tensor, None]:
        return query, None  # W_a q scores positions; no key enters the energies


@register_attention("none")
class NoAttention(Attention):
    """No-attention baseline: energies 0, so uniform weights over the real source.

    The context is the mean of the encoder states: a fixed summary of the source that
    does not depend on the decoder state.
    """

    content_based = False

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return query.new_zeros(query.size(0), query.size(1), keys.size(1))

    def scored_inputs(self, query: Tensor, prepared_keys: Tensor) -> tuple[None, None]:
        return None, None
