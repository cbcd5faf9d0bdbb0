"""Local attention (Luong et al., 2015): a window of half-width D around an aligned position.

Both types wrap a content score (`cfg.score`, built through the registry) and attend only
to keys s with |s - p_t| <= D, where S_b is each row's real source length (padding masks
are prefixes) and D = `cfg.window`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seq2seq.attention.base import Attention, attention_class, register_attention, source_lengths
from seq2seq.config import AttentionConfig


class LocalAttention(Attention):
    """A content score restricted to the window [c_t - D, c_t + D], c_t = `centre(...)`."""

    content_based = False
    options = frozenset({"window", "score"})

    def __init__(self, query_dim: int, key_dim: int, cfg: AttentionConfig) -> None:
        super().__init__(query_dim, key_dim, cfg)
        # Its score only: this module normalizes, inside the window.
        inner = cfg.model_copy(update={"type": cfg.score, "heads": 1, "normalizer": "softmax"})
        self.inner = attention_class(cfg.score)(query_dim, key_dim, inner)
        self.window = cfg.window

    def prepare_keys(self, keys: Tensor) -> Tensor:
        return self.inner.prepare_keys(keys)

    def prepare_values(self, values: Tensor) -> Tensor:
        return self.inner.prepare_values(values)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return self.inner.score(query, keys)

    def scored_inputs(
        self, query: Tensor, prepared_keys: Tensor
    ) -> tuple[Tensor | None, Tensor | None]:
        return self.inner.scored_inputs(query, prepared_keys)

    def learned_scales(self) -> dict[str, Tensor]:
        return self.inner.learned_scales()

    def centre(self, query: Tensor, mask: Tensor, positions: Tensor | None) -> Tensor:
        """(B, Tq) window centre, inside [0, S_b - 1] so that the window is never empty."""
        raise NotImplementedError

    def allowed(self, query: Tensor, mask: Tensor, positions: Tensor | None) -> Tensor:
        centre = self.centre(query, mask, positions)
        steps = torch.arange(mask.size(-1), device=mask.device)
        inside = (steps - centre.unsqueeze(-1)).abs() <= self.window
        return mask & inside


@register_attention("local-m")
class LocalMonotonicAttention(LocalAttention):
    """local-m: monotonic alignment, p_t = the query's position, clamped into [0, S_b - 1].

    Decoders pass p_t = t * r, the decoder step t times the training corpus's ratio r of
    source to target length (r = 1 is the paper's p_t = t).

    Weights are the normalized wrapped score inside the window and sum to 1.
    """

    def centre(self, query: Tensor, mask: Tensor, positions: Tensor | None) -> Tensor:
        if positions is None:
            raise ValueError("local-m attention needs positions (the decoder step of each query)")
        last = (source_lengths(mask) - 1).clamp(min=0)
        return torch.minimum(positions, last)


@register_attention("local-p")
class LocalPredictiveAttention(LocalAttention):
    """local-p: predicted alignment p_t = S_b * sigmoid(v_p^T tanh(W_p q)), in [0, S_b].

    Keys outside [p_t - D, p_t + D] are masked before normalizing (centre clamped to
    S_b - 1 so the window is never empty), then the weights are multiplied by a Gaussian
    exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D / 2, without renormalising, as the paper
    does: they sum to at most 1. `renormalize: true` divides by their sum (sum 1).
    Positions are not used: the alignment is predicted from the query.
    """

    options = frozenset({"window", "score", "renormalize"})

    def __init__(self, query_dim: int, key_dim: int, cfg: AttentionConfig) -> None:
        super().__init__(query_dim, key_dim, cfg)
        self.align = nn.Sequential(
            nn.Linear(query_dim, query_dim, bias=False),
            nn.Tanh(),
            nn.Linear(query_dim, 1, bias=False),
        )
        # v_p starts at 0, so p_t = S/2 for every step until the alignment is learned. A
        # random v_p tilts every step's window towards one end of the source, and the
        # model can stay there: the RNN on the toy task then reached BLEU 27 in 800
        # updates instead of 99 (seed 1; seed 3 learned either way).
        nn.init.zeros_(self.align[2].weight)
        self.sigma = cfg.window / 2
        self.renormalize = cfg.renormalize

    def aligned_position(self, query: Tensor, mask: Tensor) -> Tensor:
        """(B, Tq) real-valued p_t in [0, S_b]."""
        return source_lengths(mask) * torch.sigmoid(self.align(query).squeeze(-1))

    def centre(self, query: Tensor, mask: Tensor, positions: Tensor | None) -> Tensor:
        aligned = self.aligned_position(query, mask)
        last = (source_lengths(mask) - 1).clamp(min=0).to(aligned.dtype)
        return torch.minimum(aligned, last)

    def shape_weights(
        self, weights: Tensor, query: Tensor, mask: Tensor, positions: Tensor | None
    ) -> Tensor:
        aligned = self.aligned_position(query, mask).unsqueeze(-1)
        steps = torch.arange(weights.size(-1), device=weights.device)
        weights = weights * torch.exp(-((steps - aligned) ** 2) / (2 * self.sigma**2))
        if self.renormalize:
            weights = weights / weights.sum(-1, keepdim=True)
        return weights
