"""The attention contract and the registry of attention types by name.

Every type is one `Attention` subclass registered with `@register_attention(name)`, in
any module of this package (the package imports them all). A subclass writes only
`score`; the base class owns masking, the normalizer (softmax unless the config names
another, `normalizers.py`) and the weighted sum, so every type gets the same guarantees:
weights are exactly 0 at masked keys and sum to 1 over the rest (local-p: at most 1,
unless renormalised). The options a type reads are named in its
`options`; the config schema refuses the others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from seq2seq.attention.hard import PositionChoice
from seq2seq.attention.normalizers import Normalizer, build_normalizer
from seq2seq.attention.positions import PositionBias, Rotation
from seq2seq.config import ATTENTION_TYPES, AttentionConfig


class AttentionOutput(NamedTuple):
    context: Tensor  # (B, Tq, Dv)
    # (B, Tq, Tk), or (B, H, Tq, Tk) for multi-head; None only when the caller passed
    # need_weights=False and the type took a fused path that never forms them.
    weights: Tensor | None


# The fused kernels attention may use on a GPU: not cuDNN's, which plans a kernel for each new
# shape (about 0.35 s per update on an H100 with torch 2.11), and translation batches rarely
# repeat one: with it a bf16 update of the Multi30k recipe on a new shape took 11x as long.
_GPU_KERNELS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def fused_attention(
    query: Tensor, keys: Tensor, values: Tensor, mask: Tensor, dropout: float = 0.0
) -> Tensor:
    """`F.scaled_dot_product_attention` (no extra scale; `dropout` of the weights), with the
    kernels that are fast for it here: on a GPU any but cuDNN's (`_GPU_KERNELS`); on the
    CPU the fused one, except for a pass that needs gradients in bfloat16 or float16, where
    its backward made a bf16 training step of the Multi30k Transformer recipe 1.2-1.3x
    slower (docs/benchmarks.md) and PyTorch's math kernel, which computes in float32, is
    used."""
    if query.device.type == "cuda":
        with sdpa_kernel(_GPU_KERNELS):
            return F.scaled_dot_product_attention(
                query, keys, values, attn_mask=mask, dropout_p=dropout
            )
    slow_backward = (
        query.dtype in (torch.bfloat16, torch.float16)
        and torch.is_grad_enabled()
        and (query.requires_grad or keys.requires_grad or values.requires_grad)
    )
    if not slow_backward:
        return F.scaled_dot_product_attention(
            query, keys, values, attn_mask=mask, dropout_p=dropout
        )
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(
            query, keys, values, attn_mask=mask, dropout_p=dropout
        )


class AttentionRecorder(Protocol):
    """What `attend` tells while diagnostics are measured (see `attention.diagnostics`)."""

    def observe(
        self,
        attention: Attention,
        query: Tensor,
        prepared_keys: Tensor,
        mask: Tensor,
        positions: Tensor | None,
    ) -> None: ...


def register_attention(name: str) -> Callable[[type[Attention]], type[Attention]]:
    """Register an `Attention` subclass as type `name`, for configs and `build_attention`."""

    def add(cls: type[Attention]) -> type[Attention]:
        cls.name = name
        return ATTENTION_TYPES.add(name)(cls)

    return add


def attention_class(name: str) -> type[Attention]:
    """The class registered as `name` (names are validated by the config)."""
    return ATTENTION_TYPES[name]  # type: ignore[return-value]


def attention_names() -> list[str]:
    return sorted(ATTENTION_TYPES)


def content_score_names() -> list[str]:
    """The types whose energies compare query and key content: what local attention wraps."""
    return sorted(name for name, cls in ATTENTION_TYPES.items() if cls.content_based)


class Attention(nn.Module):
    """Scores queries against keys and returns the attention-weighted sum of values.

    `query` (B, Tq, Dq), `keys` (B, Tk, Dk), `values` (B, Tk, Dv); `mask` (B, 1 or Tq, Tk)
    is True where attending is allowed. `positions` (B, Tq) is the decoder time step of
    each query, for types whose weights depend on position.

        weights = shape_weights(normalize(score(q, k) masked to -inf outside allowed(mask)))
        context = weights @ values

    `cfg.heads` is how many heads the rows of its batch interleave (b * H + h): more than
    one only for the score a `MultiHead` runs, whose normalizer may learn one alpha per head.
    """

    name: str = ""
    # RNN wiring: Bahdanau-style types attend with the previous decoder state, before the
    # cell; Luong-style types attend with the new state, after it (with input feeding).
    attends_before_cell: bool = False
    # False for types whose energies ignore the key content (location, none) and for
    # wrappers (local, multi-head): local attention can only wrap a content score.
    content_based: ClassVar[bool] = True
    default_heads: ClassVar[int] = 1
    # Vaswani et al.'s multi-head scaled dot product, with query, key, value and output
    # projections: the one attention other engines (CTranslate2) run. `MultiHead` over
    # plain `scaled-dot` is; a lone score has no projections, so is not.
    is_multi_head_scaled_dot: bool = False
    # The AttentionConfig fields this type reads, besides `type` and `heads`.
    options: ClassVar[frozenset[str]] = frozenset()
    # False for wrappers that leave normalizing to the module they wrap (multi-head).
    normalizes: ClassVar[bool] = True
    normalizer: Normalizer | None
    # Hard attention (`normalizer: hard`): what chooses positions from the weights.
    choice: PositionChoice | None
    # Set only while diagnostics are measured: then `attend` shows it each call's inputs.
    recorder: AttentionRecorder | None = None

    @classmethod
    def max_source_positions(cls, cfg: AttentionConfig) -> int | None:
        """The longest source (in positions, EOS included) this type can attend over, or
        None for no limit; translation cuts longer sources to fit."""
        return None

    def __init__(self, query_dim: int, key_dim: int, cfg: AttentionConfig) -> None:
        super().__init__()
        self.query_dim = query_dim
        self.key_dim = key_dim
        self.normalizer = build_normalizer(cfg) if self.normalizes else None
        hard = self.normalizes and cfg.is_hard
        self.choice = PositionChoice(cfg.hard, cfg.heads or 1) if hard else None
        # Where the weights are formed (a multi-head wrapper leaves it to its score).
        self.weight_dropout = cfg.dropout if self.normalizes else 0.0
        # `model.positions` alibi or relative: set by the Transformer on its self-attention's
        # normalizing modules, a bias on the energies by position (positions.py). (An
        # instance attribute: a class default would hide the submodule assigned later.)
        self.position_bias: PositionBias | None = None
        # `model.positions: rotary`: the queries and keys rotated by position, likewise.
        self.position_rotation: Rotation | None = None

    def fused_mask(
        self, mask: Tensor, positions: Tensor | None, keys: int, dtype: torch.dtype
    ) -> Tensor:
        """What `fused_attention` takes as its mask: `mask` itself, or with a position
        bias the bias at the allowed keys and -inf at the others, in the query's `dtype`."""
        if self.position_bias is None:
            return mask
        bias = self.position_bias(positions, keys).masked_fill(~mask, float("-inf"))
        return bias.to(dtype)

    def rotated(
        self, query: Tensor, keys: Tensor, positions: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """The query and keys as the energies compare them: rotated by their positions
        (`model.positions: rotary`; keys at 0 .. Tk - 1), or as they are."""
        rotate = self.position_rotation
        if rotate is None:
            return query, keys
        places = torch.arange(keys.size(-2), device=keys.device)
        return rotate(query, positions), rotate(keys, places)

    @property
    def training_dropout(self) -> float:
        """The attention dropout of this pass: `cfg.dropout` while training, else 0."""
        return self.weight_dropout if self.training else 0.0

    @property
    def fusable(self) -> bool:
        """Whether PyTorch's fused attention computes its context: softmax weights, taken
        as they are (no hard choice)."""
        return self.normalizer.fusable and self.choice is None

    @property
    def graph_safe(self) -> bool:
        """Whether a CUDA graph can capture it: its normalizer reads nothing on the host,
        and it makes no hard choice (whose records for the loss outlive the pass: capture
        is not verified with them, so such a model trains op by op)."""
        safe = self.normalizer is None or self.normalizer.graph_safe
        return safe and self.choice is None

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
        """The keys each query may attend to, before normalizing (local: a window)."""
        return mask

    def shape_weights(
        self, weights: Tensor, query: Tensor, mask: Tensor, positions: Tensor | None
    ) -> Tensor:
        """Position-dependent reshaping of the normalized weights (local-p: a Gaussian).

        `mask` is the padding mask given to `attend`, not the narrowed `allowed` one.
        """
        return weights

    def scored_inputs(
        self, query: Tensor, prepared_keys: Tensor
    ) -> tuple[Tensor | None, Tensor | None]:
        """The query and keys as `score` compares them, for diagnostics of their norms;
        None for a side the energies do not read."""
        return query, prepared_keys

    def learned_scales(self) -> dict[str, Tensor]:
        """Scalars that set the scale of the energies, by name (cosine: its temperature,
        learned or fixed), for diagnostics."""
        return {}

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
            query,
            self.prepare_keys(keys),
            self.prepare_values(values),
            mask,
            positions,
            need_weights,
        )

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
        the fused `F.scaled_dot_product_attention`); the context is the same. Hard
        attention's weights are its choice's (`hard.PositionChoice`).
        """
        if self.recorder is not None:
            self.recorder.observe(self, query, prepared_keys, mask, positions)
        _, weights = self.energies_and_weights(query, prepared_keys, mask, positions)
        if self.choice is not None:
            weights = self.choice(weights)
        # The context reads the dropped weights; the weights returned stay a distribution.
        read = F.dropout(weights, self.training_dropout) if self.training_dropout else weights
        return AttentionOutput(torch.bmm(read, prepared_values), weights)

    def energies_and_weights(
        self, query: Tensor, prepared_keys: Tensor, mask: Tensor, positions: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """The energies score(q, k) (B, Tq, Tk), before masking, and the weights (hard
        attention: the distribution its choice draws from)."""
        allowed = self.allowed(query, mask, positions)
        energies = self.score(*self.rotated(query, prepared_keys, positions))
        if self.position_bias is not None:
            energies = energies + self.position_bias(positions, energies.size(-1))
        weights = self.normalizer(energies.masked_fill(~allowed, float("-inf")))
        return energies, self.shape_weights(weights, query, mask, positions)


def source_lengths(mask: Tensor) -> Tensor:
    """(B, 1 or Tq) number of allowed keys of each query row of a padding mask."""
    return mask.sum(-1)
