"""Attention modules from their config section: the one place that decides whether a type
runs as one head or is wrapped in `MultiHead`."""

from __future__ import annotations

from seq2seq.attention.base import Attention, attention_class
from seq2seq.attention.multihead import MultiHead
from seq2seq.config import AttentionConfig


def build_attention(
    cfg: AttentionConfig, query_dim: int, key_dim: int, heads: int | None = None
) -> Attention:
    """An attention module of type `cfg.type` with `heads` heads (default: `cfg.heads`, else
    1; `ModelConfig.heads` says how many a model's section has). More than one wraps the
    type in `MultiHead`."""
    cls = attention_class(cfg.type)
    heads = heads or cfg.heads or 1
    if heads > 1 and not issubclass(cls, MultiHead):
        cls = MultiHead
    return cls(query_dim, key_dim, cfg.model_copy(update={"heads": heads}))
