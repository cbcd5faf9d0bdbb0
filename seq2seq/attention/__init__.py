"""Attention types by name: importing this package registers all of them."""

from seq2seq.attention import local, multihead, scores  # noqa: F401  (registers the types)
from seq2seq.attention.base import (
    Attention,
    AttentionOutput,
    attention_names,
    build_attention,
    content_score_names,
    padding_mask,
    register_attention,
)
from seq2seq.attention.multihead import MultiHead

__all__ = [
    "Attention",
    "AttentionOutput",
    "MultiHead",
    "attention_names",
    "build_attention",
    "content_score_names",
    "padding_mask",
    "register_attention",
]
