"""The model contract that training and every search share, whatever the architecture.

`encode` runs once per source batch; `init_state` and `decode_step` advance the decoder
one token at a time; `forward` is the teacher-forced pass used in training. Search code
touches nothing else, so greedy and beam search serve every architecture.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import NamedTuple, Protocol

import torch
from torch import Tensor, nn


@dataclass
class Memory:
    """The encoded source: batch-first tensors, so beams can reorder it by index.

    Keys and values are already through the attention's `prepare_keys`/`prepare_values`,
    once per source rather than once per step. A Transformer keeps one pair per decoder
    layer, stacked on dim 1: (B, L, S, D).
    """

    keys: Tensor  # (B, S, Dk), or (B, L, S, Dk)
    values: Tensor  # (B, S, Dv), or (B, L, S, Dv)
    mask: Tensor  # (B, 1, S), True at real source positions
    summary: Tensor  # (B, Ds), a fixed-size summary of the source (final encoder state)

    def index_select(self, index: Tensor) -> Memory:
        return replace(self, **{f.name: getattr(self, f.name)[index] for f in fields(self)})


class DecoderState(Protocol):
    def index_select(self, index: Tensor) -> DecoderState: ...


class Step(NamedTuple):
    log_probs: Tensor  # (B, V)
    state: DecoderState
    # (B, S), or (B, H, S) for multi-head (heads kept, not averaged); None when the step
    # was not asked for weights
    attention: Tensor | None


class Seq2Seq(nn.Module):
    """An encoder-decoder that the trainer and the searches drive through this contract.

    `length_ratio` (a buffer, so checkpoints carry it) is the training corpus's source
    length over its target length: decoders map target step t to source position t * ratio
    for the attention types that centre on a position (local-m). The trainer sets it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("length_ratio", torch.tensor(1.0))

    def source_positions(self, steps: Tensor) -> Tensor:
        """Target steps (B, T) long -> the source positions they map to (B, T) float."""
        return steps * self.length_ratio

    def encode(self, src: Tensor, src_mask: Tensor) -> Memory:
        """`src` (B, S) token ids, `src_mask` (B, 1, S) -> the encoded source."""
        raise NotImplementedError

    def init_state(self, memory: Memory) -> DecoderState:
        raise NotImplementedError

    def decode_step(
        self, memory: Memory, state: DecoderState, prev_tokens: Tensor, need_weights: bool = True
    ) -> Step:
        """One decoder step from the previous tokens (B,) -> log-probabilities (B, V), and
        the attention weights if `need_weights` (without, types with a fused path skip
        forming them)."""
        raise NotImplementedError

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits (B, T, V) for target inputs `tgt_in` (B, T)."""
        raise NotImplementedError
