"""Multi-head attention over any registered score (Vaswani et al., 2017).

    head_h  = Attention_score(q W_q^h, k W_k^h, v W_v^h)
    context = [head_1; ...; head_H] W_o

One score module serves every head (heads are folded into the batch dimension), so the
wrapped type's masking, normalizer and weight shaping run per head unchanged. Values have
size `key_dim` and so does the context; weights come back as (B, H, Tq, Tk). Heads of
`scaled-dot` asked for no weights take PyTorch's fused attention over (B, H, T, d) views
instead: no copies of the heads, no mask per head.
"""

from __future__ import annotations

from torch import Tensor, nn

from seq2seq.attention.base import (
    Attention,
    AttentionOutput,
    attention_class,
    fused_attention,
    register_attention,
)
from seq2seq.attention.scores import ScaledDotAttention
from seq2seq.config import AttentionConfig


class MultiHead(Attention):
    """H heads of `inner_type` (default: `cfg.type`), each of size key_dim / H."""

    inner_type: str | None = None
    content_based = False
    normalizes = False  # its inner score does, per head

    def __init__(self, query_dim: int, key_dim: int, cfg: AttentionConfig) -> None:
        super().__init__(query_dim, key_dim, cfg)
        self.heads = cfg.heads or 1
        if key_dim % self.heads:
            raise ValueError(f"{self.heads} attention heads do not divide key_dim {key_dim}")
        head_dim = key_dim // self.heads
        inner = cfg.model_copy(update={"type": self.inner_type or cfg.type})
        # The class itself, not build.py's wrapper: its `heads` tells its normalizer how
        # many heads its rows interleave.
        self.inner = attention_class(inner.type)(head_dim, head_dim, inner)
        self.attends_before_cell = self.inner.attends_before_cell
        # A temperature or another normalizer makes it another model than other engines run.
        self.is_multi_head_scaled_dot = (
            self.fusable and type(self.inner) is ScaledDotAttention and self.inner.log_scale is None
        )
        self.query_proj = nn.Linear(query_dim, key_dim, bias=cfg.bias)
        self.key_proj = nn.Linear(key_dim, key_dim, bias=cfg.bias)
        self.value_proj = nn.Linear(key_dim, key_dim, bias=cfg.bias)
        self.out_proj = nn.Linear(key_dim, key_dim, bias=cfg.bias)
        for proj in (self.query_proj, self.key_proj, self.value_proj, self.out_proj):
            nn.init.xavier_uniform_(proj.weight)  # variance-preserving, as Vaswani et al.
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)

    @property
    def fusable(self) -> bool:
        """Whether its heads are what PyTorch's fused attention runs (softmax, no choice)."""
        return self.inner.fusable

    def split(self, x: Tensor) -> Tensor:
        """(B, T, H * d) -> (B * H, T, d), row b * H + h holding head h of item b."""
        batch, steps, size = x.shape
        return x.view(batch, steps, self.heads, size // self.heads).transpose(1, 2).flatten(0, 1)

    def merge(self, x: Tensor) -> Tensor:
        """(B * H, T, d) -> (B, T, H * d)."""
        rows, steps, size = x.shape
        return x.view(rows // self.heads, self.heads, steps, size).transpose(1, 2).flatten(2)

    def prepare_keys(self, keys: Tensor) -> Tensor:
        keys = self.key_proj(keys)
        if type(self.inner).prepare_keys is Attention.prepare_keys:  # nothing to do per head
            return keys
        # Merged back to batch-first (B, Tk, H * d) so beams can reorder it by index.
        return self.merge(self.inner.prepare_keys(self.split(keys)))

    def prepare_values(self, values: Tensor) -> Tensor:
        return self.value_proj(values)

    def fused_heads(
        self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor, positions: Tensor | None
    ) -> Tensor:
        """Scaled-dot heads of projected (B, T, H * d) inputs, without weights -> (B, Tq, H * d)."""

        def heads_first(x: Tensor) -> Tensor:  # a (B, H, T, d) view
            return x.view(x.size(0), x.size(1), self.heads, -1).transpose(1, 2)

        allowed = mask.unsqueeze(1)  # one mask for every head
        if self.inner.position_bias is not None:  # a bias per head: (B, H, Tq, Tk)
            per_row = self.inner.fused_mask(
                mask.repeat_interleave(self.heads, dim=0),
                positions.repeat_interleave(self.heads, dim=0),
                keys.size(1),
                query.dtype,
            )
            allowed = per_row.view(query.size(0), self.heads, *per_row.shape[1:])
        query, keys = heads_first(query), heads_first(keys)
        if self.inner.position_rotation is not None:  # every head at its item's positions
            query, keys = self.inner.rotated(query, keys, positions.unsqueeze(1))
        context = fused_attention(
            query, keys, heads_first(values), allowed, self.inner.training_dropout
        )
        return context.transpose(1, 2).flatten(2)

    def attend(
        self,
        query: Tensor,
        prepared_keys: Tensor,
        prepared_values: Tensor,
        mask: Tensor,
        positions: Tensor | None = None,
        need_weights: bool = True,
    ) -> AttentionOutput:
        inner = self.inner
        fused = type(inner) is ScaledDotAttention and self.fusable and inner.recorder is None
        if not need_weights and fused:
            query = inner.tempered(self.query_proj(query))
            context = self.fused_heads(query, prepared_keys, prepared_values, mask, positions)
            return AttentionOutput(self.out_proj(context), None)
        heads = self.heads
        context, weights = self.inner.attend(
            self.split(self.query_proj(query)),
            self.split(prepared_keys),
            self.split(prepared_values),
            mask.repeat_interleave(heads, dim=0),
            None if positions is None else positions.repeat_interleave(heads, dim=0),
            need_weights,
        )
        if weights is not None:
            weights = weights.view(-1, heads, *weights.shape[1:])
        return AttentionOutput(self.out_proj(self.merge(context)), weights)


@register_attention("multihead")
class MultiHeadAttention(MultiHead):
    """Multi-head scaled dot product: MultiHead over `scaled-dot`; 4 heads by default."""

    inner_type = "scaled-dot"
    default_heads = 4
    options = ScaledDotAttention.options  # its temperature
