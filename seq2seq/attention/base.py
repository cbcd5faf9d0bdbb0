"""The attention contract, the registry of attention types by name, and masking.

Every type is one `Attention` subclass registered with `@register_attention(name)`.
A subclass writes only `score`; the base class owns masking, the softmax and the
weighted sum, so every type gets the same guarantees: weights are exactly 0 at
masked keys and sum to 1 over the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor, nn

_REGISTRY: dict[str, type[Attention]] = {}


class AttentionOutput(NamedTuple):
    context: Tensor  # (B, Tq, Dv)
    weights: Tensor  # (B, Tq, Tk)


def register_attention(name: str) -> Callable[[type[Attention]], type[Attention]]:
    def add(cls: type[Attention]) -> type[Attention]:
        if name in _REGISTRY:
            raise ValueError(f"attention type {name!r} is registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return add


def attention_names() -> list[str]:
    return sorted(_REGISTRY)


def build_attention(name: str, query_dim: int, key_dim: int) -> Attention:
    """An attention module of a registered type (names are validated by the config)."""
    return _REGISTRY[name](query_dim, key_dim)


class Attention(nn.Module):
    """Scores queries against keys and returns the attention-weighted sum of values.

    `query` (B, Tq, Dq), `keys` (B, Tk, Dk), `values` (B, Tk, Dv); `mask` (B, 1 or Tq, Tk)
    is True where attending is allowed. `positions` (B, Tq) is the decoder time step of
    each query, for types whose weights depend on position.
    """

    name: str = ""
    # RNN wiring: Bahdanau-style types attend with the previous decoder state, before the
    # cell; Luong-style types attend with the new state, after it (with input feeding).
    attends_before_cell: bool = False

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        self.query_dim = query_dim
        self.key_dim = key_dim

    def prepare_keys(self, keys: Tensor) -> Tensor:
        """Key-side work that does not depend on the query (e.g. W k).

        A decoder calls it once per source and passes the result to `attend` at every
        step, instead of recomputing it per step.
        """
        return keys

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        """Energies (B, Tq, Tk) of each query against each (prepared) key."""
        raise NotImplementedError

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor,
        positions: Tensor | None = None,
    ) -> AttentionOutput:
        return self.attend(query, self.prepare_keys(keys), values, mask, positions)

    def attend(
        self,
        query: Tensor,
        prepared_keys: Tensor,
        values: Tensor,
        mask: Tensor,
        positions: Tensor | None = None,
    ) -> AttentionOutput:
        """`forward` with keys already passed through `prepare_keys`."""
        energies = self.score(query, prepared_keys).masked_fill(~mask, float("-inf"))
        weights = torch.softmax(energies, dim=-1)
        return AttentionOutput(torch.bmm(weights, values), weights)


def padding_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """(B, 1, T) mask, True at the first `lengths[b]` positions of each row."""
    max_len = int(lengths.max()) if max_len is None else max_len
    steps = torch.arange(max_len, device=lengths.device)
    return (steps[None, :] < lengths[:, None]).unsqueeze(1)
