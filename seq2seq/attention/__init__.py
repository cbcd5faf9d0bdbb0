"""Attention types by name.

Importing this package imports every module in it, and each module's
`@register_attention(name)` classes become types that configs can name: a new type is
one class in a new or existing module here, with nothing else to edit.
"""

import importlib
import pkgutil

from seq2seq.attention.base import (
    Attention,
    AttentionOutput,
    attention_class,
    attention_names,
    content_score_names,
    register_attention,
)
from seq2seq.attention.build import build_attention
from seq2seq.attention.multihead import MultiHead

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "Attention",
    "AttentionOutput",
    "MultiHead",
    "attention_class",
    "attention_names",
    "build_attention",
    "content_score_names",
    "register_attention",
]
