"""Score functions: each attention type is its energy formula and nothing else."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.attention.base import Attention, AttentionOutput, register_attention
from seq2seq.config import AttentionConfig
from seq2seq.errors import UserError


@register_attention("dot")
class DotAttention(Attention):
    """Luong dot: q . k (query and key sizes must match)."""

    def __init__(self, query_dim: int, key_dim: int, cfg: AttentionConfig) -> None:
        super().__init__(query_dim, key_dim, cfg)
        if query_dim != key_dim:
            raise ValueError(
                f"{self.name} attention needs query_dim == key_dim, got {query_dim}, {key_dim}"
            )

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(query, keys.transpose(1, 2))


@register_attention("scaled-dot")
class ScaledDotAttention(DotAttention):
    """Scaled dot product (Vaswani et al., 2017): q . k / sqrt(d).

    Without weights asked for, it runs PyTorch's fused `F.scaled_dot_product_attention`.
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
        if need_weights:
            return super().attend(query, prepared_keys, prepared_values, mask, positions)
        if self.recorder is not None:
            self.recorder.observe(self, query, prepared_keys, mask, positions)
        context = F.scaled_dot_product_attention(
            query, prepared_keys, prepared_values, attn_mask=mask
        )
        return AttentionOutput(context, None)


@register_attention("cosine")
class CosineAttention(DotAttention):
    """Cosine similarity times a learned inverse temperature: exp(s) * cos(q, k).

    cos(q, k) alone is bounded to [-1, 1], so a plain softmax over it stays nearly flat
    (at most e^2 between two keys); the temperature exp(s), s learned and initialised to
    log(10), lets the weights sharpen.
    """

    def __init__(self, query_dim: int, key_dim: int, cfg: AttentionConfig) -> None:
        super().__init__(query_dim, key_dim, cfg)
        self.log_scale = nn.Parameter(torch.tensor(math.log(10.0)))

    def prepare_keys(self, keys: Tensor) -> Tensor:
        return F.normalize(keys, dim=-1)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return self.log_scale.exp() * super().score(F.normalize(query, dim=-1), keys)

    def scored_inputs(self, query: Tensor, prepared_keys: Tensor) -> tuple[Tensor, Tensor]:
        return F.normalize(query, dim=-1), prepared_keys

    def learned_scales(self) -> dict[str, Tensor]:
        return {"temperature": self.log_scale.exp()}


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

    It never looks at the keys; the base softmax masks padding and so renormalises over
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
