"""Attention types by name: importing this package registers all of them."""

from seq2seq.attention import scores  # noqa: F401  (registers the score types)
from seq2seq.attention.base import (
    Attention,
    AttentionOutput,
    attention_names,
    build_attention,
    padding_mask,
    register_attention,
)

__all__ = [
    "Attention",
    "AttentionOutput",
    "attention_names",
    "build_attention",
    "padding_mask",
    "register_attention",
]
