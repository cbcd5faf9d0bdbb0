"""Score functions: each attention type is its energy formula and nothing else."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seq2seq.attention.base import Attention, register_attention


@register_attention("dot")
class DotAttention(Attention):
    """Luong dot: q . k (query and key sizes must match)."""

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__(query_dim, key_dim)
        if query_dim != key_dim:
            raise ValueError(
                f"dot attention needs query_dim == key_dim, got {query_dim}, {key_dim}"
            )

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(query, keys.transpose(1, 2))


@register_attention("general")
class GeneralAttention(Attention):
    """Luong general (bilinear): q^T W k."""

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__(query_dim, key_dim)
        self.proj = nn.Linear(key_dim, query_dim, bias=False)

    def prepare_keys(self, keys: Tensor) -> Tensor:
        return self.proj(keys)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(query, keys.transpose(1, 2))


@register_attention("bahdanau")
class BahdanauAttention(Attention):
    """Bahdanau additive: v^T tanh(W1 q + W2 k); in the RNN it attends before the cell."""

    attends_before_cell = True

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__(query_dim, key_dim)
        self.query_proj = nn.Linear(query_dim, key_dim, bias=False)
        self.key_proj = nn.Linear(key_dim, key_dim, bias=False)
        self.v = nn.Linear(key_dim, 1, bias=False)

    def prepare_keys(self, keys: Tensor) -> Tensor:
        return self.key_proj(keys)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        hidden = torch.tanh(self.query_proj(query).unsqueeze(2) + keys.unsqueeze(1))
        return self.v(hidden).squeeze(-1)
