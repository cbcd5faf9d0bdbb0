"""The attention contract, the registry of attention types by name, and masking.

Every type is one `Attention` subclass registered with `@register_attention(name)`.
A subclass writes only `score`; the base class owns masking, the softmax and the
weighted sum, so every type gets the same guarantees: weights are exactly 0 at
masked keys and sum to 1 over the rest (local-p: at most 1, unless renormalised).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor, nn

from seq2seq.config import AttentionConfig

_REGISTRY: dict[str, type[Attention]] = {}


class AttentionOutput(NamedTuple):
    context: Tensor  # (B, Tq, Dv)
    # (B, Tq, Tk), or (B, H, Tq, Tk) for multi-head; None only when the caller passed
    # need_weights=False and the type took a fused path that never forms them.
    weights: Tensor | None


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


def content_score_names() -> list[str]:
    """The types whose energies compare query and key content: what local attention wraps."""
    return sorted(name for name, cls in _REGISTRY.items() if cls.content_based)


def build_attention(
    cfg: AttentionConfig, query_dim: int, key_dim: int, default_heads: int = 1
) -> Attention:
    """An attention module of type `cfg.type` (names are validated by the config).

    Heads are `cfg.heads`, else `default_heads`, else the type's own default (multihead: 4
    when it divides `key_dim`). More than one head wraps the type in `MultiHead`.
    """
    # Imported here: multihead.py builds on this module.
    from seq2seq.attention.multihead import MultiHead

    cls = _REGISTRY[cfg.type]
    heads = cfg.heads or default_heads
    if cfg.heads is None and heads == 1 and key_dim % cls.default_heads == 0:
        heads = cls.default_heads
    if heads > 1 and not issubclass(cls, MultiHead):
        cls = MultiHead
    return cls(query_dim, key_dim, cfg.model_copy(update={"heads": heads}))


class Attention(nn.Module):
    """Scores queries against keys and returns the attention-weighted sum of values.

    `query` (B, Tq, Dq), `keys` (B, Tk, Dk), `values` (B, Tk, Dv); `mask` (B, 1 or Tq, Tk)
    is True where attending is allowed. `positions` (B, Tq) is the decoder time step of
    each query, for types whose weights depend on position.

        weights = shape_weights(softmax(score(q, k) masked to -inf outside allowed(mask)))
        context = weights @ values
    """

    name: str = ""
    # RNN wiring: Bahdanau-style types attend with the previous decoder state, before the
    # cell; Luong-style types attend with the new state, after it (with input feeding).
    attends_before_cell: bool = False
    # False for types whose energies ignore the key content (location, none) and for
    # wrappers (local, multi-head): local attention can only wrap a content score.
    content_based: bool = True
    default_heads: int = 1

    def __init__(self, query_dim: int, key_dim: int, cfg: AttentionConfig) -> None:
        super().__init__()
        self.query_dim = query_dim
        self.key_dim = key_dim

    def prepare_keys(self, keys: Tensor) -> Tensor:
        """Key-side work that does not depend on the query (e.g. W k), batch-first.

        A decoder calls it once per source and passes the result to `attend` at every
        step, instead of recomputing it per step.
        """
        return keys

    def prepare_values(self, values: Tensor) -> Tensor:
        """Value-side work done once per source (multi-head: W_v v), batch-first."""
        return values

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        """Energies (B, Tq, Tk) of each query against each (prepared) key."""
        raise NotImplementedError

    def allowed(self, query: Tensor, mask: Tensor, positions: Tensor | None) -> Tensor:
        """The keys each query may attend to, before the softmax (local: a window)."""
        return mask

    def shape_weights(
        self, weights: Tensor, query: Tensor, mask: Tensor, positions: Tensor | None
    ) -> Tensor:
        """Position-dependent reshaping of the softmax weights (local-p: a Gaussian).

        `mask` is the padding mask given to `attend`, not the narrowed `allowed` one.
        """
        return weights

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor,
        positions: Tensor | None = None,
        need_weights: bool = True,
    ) -> AttentionOutput:
        return self.attend(
            query, self.prepare_keys(keys), self.prepare_values(values), mask, positions,
            need_weights,
        )  # fmt: skip

    def attend(
        self,
        query: Tensor,
        prepared_keys: Tensor,
        prepared_values: Tensor,
        mask: Tensor,
        positions: Tensor | None = None,
        need_weights: bool = True,
    ) -> AttentionOutput:
        """`forward` with keys and values already through `prepare_keys`/`prepare_values`.

        `need_weights=False` lets a type skip forming the weights (scaled-dot then runs
        the fused `F.scaled_dot_product_attention`); the context is the same.
        """
        allowed = self.allowed(query, mask, positions)
        energies = self.score(query, prepared_keys).masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(energies, dim=-1)
        weights = self.shape_weights(weights, query, mask, positions)
        return AttentionOutput(torch.bmm(weights, prepared_values), weights)


def padding_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """(B, 1, T) mask, True at the first `lengths[b]` positions of each row."""
    max_len = int(lengths.max()) if max_len is None else max_len
    steps = torch.arange(max_len, device=lengths.device)
    return (steps[None, :] < lengths[:, None]).unsqueeze(1)


def source_lengths(mask: Tensor) -> Tensor:
    """(B, 1 or Tq) number of allowed keys of each query row of a padding mask."""
    return mask.sum(-1)
