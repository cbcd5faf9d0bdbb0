"""The model contract that training and every search share, whatever the architecture.

`encode` runs once per source batch; `init_state` and `decode_step` advance the decoder
one token at a time; `forward` is the teacher-forced pass used in training. Search code
touches nothing else, so greedy and beam search serve every architecture.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from seq2seq.attention import Attention, AttentionOutput
from seq2seq.attention.hard import ChoiceLoss, choices, drawing
from seq2seq.config import ModelConfig


@dataclass
class Memory:
    """The encoded source: batch-first tensors, so beams can reorder it by index.

    Keys and values are already through the attention's `prepare_keys`/`prepare_values`,
    once per source rather than once per step. A Transformer keeps one pair per decoder
    layer, stacked on dim 1: (B, L, S, D).

    `beam` decoder rows read each source: rows b * beam .. b * beam + beam - 1 read source b.
    They share its tensors, not copies of them, and attend over them together (`attend`).
    """

    keys: Tensor  # (B, S, Dk), or (B, L, S, Dk)
    values: Tensor  # (B, S, Dv), or (B, L, S, Dv)
    mask: Tensor  # (B, 1, S), True at real source positions
    summary: Tensor  # (B, Ds), a fixed-size summary of the source (final encoder state)
    beam: int = 1

    @property
    def rows(self) -> int:
        """The decoder rows that read this memory: sources x beam."""
        return self.mask.size(0) * self.beam

    def row_values(self) -> Tensor:
        """(rows, S, Dv): each decoder row's source values (copied per beam where beam > 1)."""
        return self.values if self.beam == 1 else self.values.repeat_interleave(self.beam, 0)

    def index_select(self, index: Tensor) -> Memory:
        """The sources at `index`, each still read by `beam` rows."""
        tensors = ("keys", "values", "mask", "summary")
        return replace(self, **{name: getattr(self, name)[index] for name in tensors})

    def widened(self, beam: int) -> Memory:
        """The same sources, each read by `beam` rows (from one row each)."""
        if self.beam != 1:
            raise ValueError(f"only a memory read by one row per source widens, not {self.beam}")
        return replace(self, beam=beam)

    def attend(
        self,
        attention: Attention,
        query: Tensor,
        positions: Tensor,
        need_weights: bool,
        layer: int | None = None,
    ) -> AttentionOutput:
        """`attention` of the rows' queries (rows, Tq, Dq) at `positions` (rows, Tq) over
        their sources (`layer`: that decoder layer's keys and values).

        With beam > 1 (one step, Tq = 1) the beams of a source are its Tq = beam queries:
        one attention over each source instead of one over each of beam copies.
        """
        keys, values = (
            (self.keys, self.values)
            if layer is None
            else (self.keys[:, layer], self.values[:, layer])
        )
        if self.beam == 1:
            return attention.attend(query, keys, values, self.mask, positions, need_weights)
        sources = self.mask.size(0)
        context, weights = attention.attend(
            query.view(sources, self.beam, -1),
            keys,
            values,
            self.mask,
            positions.view(sources, self.beam),
            need_weights,
        )
        context = context.view(self.rows, 1, -1)
        if weights is not None:  # (B, [H,] beam, S) -> (rows, [H,] 1, S)
            weights = weights.movedim(-2, 1).flatten(0, 1).unsqueeze(-2)
        return AttentionOutput(context, weights)


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

    # Whether a training update of one batch shape can be captured as a CUDA graph and
    # replayed for any batch of that shape: nothing in it reads the batch on the host.
    graph_capturable = True
    # Whether training recomputes each layer's activations in the backward pass instead of
    # keeping them (train.checkpoint_activations; `run_layer`): the trainer sets it.
    checkpoint_activations = False

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("length_ratio", torch.tensor(1.0))
        # Hard attention whose choices add to the loss (REINFORCE, an entropy bonus): the
        # terms (set by the architecture; an instance attribute, not a class one, which
        # would hide the submodule), and the last pass's soft-attention logits where its
        # baseline is soft.
        self.choice_loss: ChoiceLoss | None = None
        self.baseline_logits: Tensor | None = None
        # Guided alignment: while `keeps_attention` (the trainer sets it), the teacher-forced
        # pass keeps the model's attention (model.alignment_layer's), heads averaged.
        self.keeps_attention = False
        self.kept_attention: Tensor | None = None
        # How many heads (the first) are the model's attention (model.alignment_heads); 0:
        # all (`set_alignment_heads`).
        self.alignment_heads = 0

    def run_layer(self, layer: nn.Module, *args: Any) -> Any:
        """`layer(*args)`; where training checkpoints activations, through
        torch.utils.checkpoint, which keeps the inputs alone and recomputes the rest in the
        backward pass (with the same dropout masks: it replays the random generators)."""
        if self.checkpoint_activations and self.training and torch.is_grad_enabled():
            return checkpoint(layer, *args, use_reentrant=False)
        return layer(*args)

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

    def log_probs(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced log-probabilities (B, T, V), float32: what the steps of a search
        give for the same targets (forced scoring reads them)."""
        return self(src, src_mask, tgt_in).float().log_softmax(-1)

    def set_alignment_heads(self, cfg: ModelConfig) -> None:
        """`alignment_heads` from the config: 0 where that is every head."""
        every = cfg.alignment_heads in (0, cfg.heads(cfg.attention))
        self.alignment_heads = 0 if every else cfg.alignment_heads

    def aligning(self, weights: Tensor | None, heads_dim: int) -> Tensor | None:
        """The heads of `weights` (heads on `heads_dim`) that are the model's attention:
        the first `alignment_heads`, or all."""
        if weights is None or not self.alignment_heads:
            return weights
        return weights.narrow(heads_dim, 0, self.alignment_heads)

    def keep_attention(self, weights: Tensor, heads_dim: int) -> None:
        """Keep a teacher-forced pass's attention (B, T, S), `weights` with the heads on
        `heads_dim` (multi-head) averaged, where `keeps_attention`."""
        if weights.dim() == 4:
            weights = weights.mean(heads_dim)
        self.kept_attention = weights

    def take_kept_attention(self) -> Tensor:
        """The attention the last teacher-forced pass kept (`keeps_attention`), given up."""
        kept, self.kept_attention = self.kept_attention, None
        if kept is None:
            raise RuntimeError("the last pass kept no attention: set keeps_attention first")
        return kept

    def needs_soft_baseline(self) -> bool:
        """Whether the pass under way draws REINFORCE's choices against the soft baseline,
        so that it must also leave the soft-attention logits in `baseline_logits`."""
        loss = self.choice_loss
        if loss is None or not loss.soft_baseline:
            return False
        return any(choice.rule == "reinforce" for choice in choices(self))

    def tied_to_choices(self, logits: Tensor) -> Tensor:
        """`logits` plus 0 times the records its choices keep for `auxiliary_loss` (the same
        values). DDP waits for the gradients of the parameters it finds behind the forward's
        output; without this it would miss those that only that loss reaches (the
        Transformer's attention under REINFORCE) and fail when they arrive."""
        if self.choice_loss is None:
            return logits
        records = [choice.last for choice in choices(self) if choice.last is not None]
        if not records:
            return logits
        anchor = sum(record.log_prob.sum() + record.entropy.sum() for record in records)
        return logits + 0 * anchor

    def auxiliary_loss(self, logits: Tensor, targets: Tensor) -> Tensor | None:
        """What training adds to the cross-entropy of `logits`, those of the last
        teacher-forced pass, against `targets` (B, T): hard attention's REINFORCE surrogate
        and entropy bonus (`attention.hard.ChoiceLoss`), summed over the target tokens,
        whose value is 0; None where the model has none."""
        if self.choice_loss is None:
            return None
        baseline, self.baseline_logits = self.baseline_logits, None
        return self.choice_loss(choices(self), logits, baseline, targets)

    def learning_signal(
        self,
        src: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        tgt_out: Tensor,
        generator: torch.Generator,
    ) -> Tensor | None:
        """REINFORCE's learning signal r - b (B, T) of one draw per target position, from
        `generator` (torch's own is left alone), as training computes it but in the model's
        present mode (the diagnostics': evaluation, without dropout); None where the
        model's attention is not trained by REINFORCE."""
        loss = self.choice_loss
        if loss is None or not loss.reinforce:
            return None
        with drawing(self, generator):
            logits = self(src, src_mask, tgt_in)
        for choice in choices(self):
            choice.take()  # the records are the loss's, not wanted here
        baseline, self.baseline_logits = self.baseline_logits, None
        return loss.signal(logits, baseline, tgt_out)
