"""Transformer encoder-decoder (Vaswani et al., 2017) with attention from the registry.

Self-attention is `model.self_attention` (scaled-dot, multi-head, by default) and the
decoder's cross-attention is `model.attention`, each multi-head over its score (4 heads
unless `heads` says otherwise). Every sublayer is residual, with its norm (`norm_type`)
before (`norm: pre`, plus a final norm) or after (`norm: post`, the paper's) the residual
sum; the feed-forward layers' activation is `ffn_activation` (blocks.py).

Attention positions: a query at position t attends to itself at t in self-attention,
and maps onto the source at t * length_ratio in cross-attention (see `Seq2Seq`).

Incremental decoding caches each layer's self-attention keys and values: a step embeds
one token, appends its keys and values to the cache and attends over the cache, so it
computes what the teacher-forced pass computes for that position under the causal mask.
The cache is preallocated and written in place (see `TransformerState`).

Hard attention (`normalizer: hard`) is the cross-attention's, per head
(`attention.hard.PositionChoice`). A choice at target position t reaches the predictions
at t and after it (later positions read t through self-attention), so REINFORCE's reward
sums their log-likelihoods, and its soft baseline is a second pass without gradient with
every choice soft.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seq2seq.attention import Attention, MultiHead, build_attention
from seq2seq.attention.hard import attending_softly, choice_loss
from seq2seq.attention.positions import Positions, frequencies, position_type
from seq2seq.config import ModelConfig
from seq2seq.models.base import Memory, Seq2Seq, Step
from seq2seq.models.blocks import FeedForward, Sublayer, make_norm
from seq2seq.models.dropout import Dropout


@dataclass
class CacheBuffers:
    """Time-first (capacity, B, D) buffers of each decoder layer's self-attention keys and
    values, shared by the states of successive steps: a step writes its position in place
    instead of copying the cache into a longer one. `filled`: the positions written."""

    keys: list[Tensor]
    values: list[Tensor]
    filled: int

    @property
    def capacity(self) -> int:
        return self.keys[0].size(0)

    def copy(self, length: int, capacity: int, index: Tensor | None = None) -> CacheBuffers:
        """New buffers of `capacity` holding the first `length` positions (of the rows at
        `index`, if given): index_select on time-first buffers reads only those."""

        def moved(buffer: Tensor) -> Tensor:
            rows = buffer.size(1) if index is None else index.numel()
            out = buffer.new_empty(capacity, rows, buffer.size(2))
            source = buffer[:length]
            if index is None:
                out[:length] = source
            else:
                torch.index_select(source, 1, index, out=out[:length])
            return out

        return CacheBuffers([moved(k) for k in self.keys], [moved(v) for v in self.values], length)


@dataclass
class TransformerState:
    buffers: CacheBuffers
    length: int  # the positions cached so far (every row is at the same step)
    step: Tensor  # (B,) long: the position of the next token

    def index_select(self, index: Tensor) -> TransformerState:
        # Room for the next position only: a beam search reorders again at the next step,
        # and a state that is not reordered grows by doubling (`writable`).
        buffers = self.buffers.copy(self.length, self.length + 1, index)
        return TransformerState(buffers, self.length, self.step[index])

    def writable(self) -> CacheBuffers:
        """Buffers where the next position can be written in place: these, unless they are
        full (then twice as long) or another state already wrote past this one's length
        (a state advanced twice: then a copy, so that each successor keeps its own)."""
        buffers, length = self.buffers, self.length
        if buffers.filled == length and length < buffers.capacity:
            return buffers
        return buffers.copy(length, max(2 * length, buffers.capacity))


# Positions the self-attention cache holds before it first grows (doubling each time).
INITIAL_CACHE_LENGTH = 32


def sinusoids(length: int, dim: int) -> Tensor:
    """(length, dim) sinusoidal position encodings: sin and cos of pos / 10000^(2i/dim)."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    rate = frequencies(dim)
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)[:, : dim // 2]
    return table


class Embedding(nn.Module):
    """Token embedding times `scale` (sqrt(d): model.scale_embedding), plus sinusoidal
    positions (unless `add_positions` is false: ALiBi's positions are in the attention),
    then dropout."""

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        pad_id: int,
        dropout: float,
        add_positions: bool = True,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
        nn.init.normal_(self.tokens.weight, std=dim**-0.5)
        with torch.no_grad():
            self.tokens.weight[pad_id].zero_()
        self.scale = math.sqrt(dim) if scale is None else scale
        table = sinusoids(1024 if add_positions else 0, dim)
        self.register_buffer("positions", table, persistent=False)
        self.add_positions = add_positions
        self.dropout = Dropout(dropout)

    def forward(self, tokens: Tensor, positions: Tensor, length: int) -> Tensor:
        """`tokens` (B, T) at `positions` (B, T), all below `length` -> (B, T, d).

        `length` comes from tensor shapes, so checking the table needs no device sync.
        """
        embedded = self.tokens(tokens) * self.scale
        if not self.add_positions:
            return self.dropout(embedded)
        if length > self.positions.size(0):
            table = sinusoids(2 * length, self.positions.size(1))
            self.positions = table.to(self.positions.device)
        return self.dropout(embedded + self.positions[positions])


def self_attend(
    attention: Attention,
    h: Tensor,
    mask: Tensor,
    positions: Tensor,
    cache: tuple[Tensor, Tensor, int] | None = None,
) -> Tensor:
    """Self-attention of `h` (B, T, d) over itself, after the cached keys and values if any.

    A cache is one step's (keys, values, length): time-first (capacity, B, D) buffers
    whose first `length` positions are the past; this step's keys and values (T = 1) are
    written at `length`, in place.
    """
    keys, values = attention.prepare_keys(h), attention.prepare_values(h)
    if cache is not None:
        key_buffer, value_buffer, length = cache
        key_buffer[length] = keys[:, 0]
        value_buffer[length] = values[:, 0]
        keys = key_buffer[: length + 1].transpose(0, 1)
        values = value_buffer[: length + 1].transpose(0, 1)
    return attention.attend(h, keys, values, mask, positions, need_weights=False).context


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        dim, pre, dropout = cfg.hidden_dim, cfg.norm == "pre", cfg.dropout
        self.self_attention = build_attention(
            cfg.self_attention, dim, dim, cfg.heads(cfg.self_attention)
        )
        self.feed_forward = FeedForward(dim, cfg.ff_dim, dropout, cfg.ffn_activation)
        self.attention_block = Sublayer(make_norm(cfg), pre, dropout)
        self.feed_forward_block = Sublayer(make_norm(cfg), pre, dropout)

    def forward(self, x: Tensor, mask: Tensor, positions: Tensor) -> Tensor:
        block = self.attention_block
        context = self_attend(self.self_attention, block.function_input(x), mask, positions)
        x = block.add_output(x, context)
        block = self.feed_forward_block
        return block.add_output(x, self.feed_forward(block.function_input(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        dim, pre, dropout = cfg.hidden_dim, cfg.norm == "pre", cfg.dropout
        self.self_attention = build_attention(
            cfg.self_attention, dim, dim, cfg.heads(cfg.self_attention)
        )
        self.cross_attention = build_attention(cfg.attention, dim, dim, cfg.heads(cfg.attention))
        self.feed_forward = FeedForward(dim, cfg.ff_dim, dropout, cfg.ffn_activation)
        self.self_attention_block = Sublayer(make_norm(cfg), pre, dropout)
        self.cross_attention_block = Sublayer(make_norm(cfg), pre, dropout)
        self.feed_forward_block = Sublayer(make_norm(cfg), pre, dropout)

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor,
        positions: Tensor,
        memory: Memory,
        layer: int,
        source_positions: Tensor,
        cache: tuple[Tensor, Tensor, int] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """-> new x and, if asked, the cross-attention weights; `layer`: this layer's index
        in the memory's keys and values."""
        block = self.self_attention_block
        context = self_attend(
            self.self_attention, block.function_input(x), self_mask, positions, cache
        )
        x = block.add_output(x, context)
        block = self.cross_attention_block
        context, weights = memory.attend(
            self.cross_attention, block.function_input(x), source_positions, need_weights, layer
        )
        x = block.add_output(x, context)
        block = self.feed_forward_block
        return block.add_output(x, self.feed_forward(block.function_input(x))), weights


class TransformerSeq2Seq(Seq2Seq):
    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int, pad_id: int) -> None:
        super().__init__()
        dim, positions = cfg.hidden_dim, position_type(cfg.positions)
        sinusoidal = positions.in_embeddings
        scale = math.sqrt(dim) if cfg.scale_embedding else 1.0
        self.src_embed = Embedding(src_vocab, dim, pad_id, cfg.dropout, sinusoidal, scale)
        self.tgt_embed = Embedding(tgt_vocab, dim, pad_id, cfg.dropout, sinusoidal, scale)
        if cfg.shared_embeddings:
            self.src_embed.tokens.weight = self.tgt_embed.tokens.weight
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        self.alignment_layer = cfg.alignment_layer % cfg.decoder_layers
        self.set_alignment_heads(cfg)
        # A final norm per stack where `final_norms` says (pre-norm leaves each stack's
        # output unnormalised; post-norm ends in one, unless a model adds its own).
        self.encoder_norm = make_norm(cfg) if cfg.final_norms else nn.Identity()
        self.decoder_norm = make_norm(cfg) if cfg.final_norms else nn.Identity()
        self.output = nn.Linear(dim, tgt_vocab, bias=cfg.output_bias)
        if self.output.bias is not None:
            nn.init.zeros_(self.output.bias)
        for layer in [*self.encoder_layers, *self.decoder_layers]:
            for module in layer.modules():
                if isinstance(module, nn.Linear):
                    nn.init.xavier_uniform_(module.weight)
        if cfg.tied_embeddings:
            self.output.weight = self.tgt_embed.tokens.weight
        if not sinusoidal:
            self.set_position_bias(cfg, positions)
        self.dim = dim
        # An attention that reads tensors on the host (sparsemax's backward) is not captured.
        self.graph_capturable = all(
            m.graph_safe for m in self.modules() if isinstance(m, Attention)
        )
        self.choice_loss = choice_loss(cfg.attention, reaches_later=True)

    def set_position_bias(self, cfg: ModelConfig, positions: type[Positions]) -> None:
        """The encoding's bias on the self-attention energies of every layer (one module
        per stack, shared by its layers: T5's table; ALiBi's holds no parameter), or its
        rotation of the queries and keys."""
        heads = cfg.heads(cfg.self_attention)
        rotation = positions.rotation(cfg.hidden_dim // heads)
        for layers, bidirectional in ((self.encoder_layers, True), (self.decoder_layers, False)):
            bias = positions.bias(heads, bidirectional)
            for layer in layers:
                attention = layer.self_attention
                scorer = attention.inner if isinstance(attention, MultiHead) else attention
                scorer.position_bias, scorer.position_rotation = bias, rotation

    def encode(self, src: Tensor, src_mask: Tensor) -> Memory:
        steps = torch.arange(src.size(1), device=src.device).expand_as(src)
        x = self.src_embed(src, steps, src.size(1))
        for layer in self.encoder_layers:
            x = self.run_layer(layer, x, src_mask, steps)
        x = self.encoder_norm(x)
        # Each decoder layer's cross-attention prepares the keys and values once, here;
        # they are stacked on dim 1 so that the memory stays batch-first.
        attentions = [layer.cross_attention for layer in self.decoder_layers]
        keys = torch.stack([a.prepare_keys(x) for a in attentions], dim=1)
        values = torch.stack([a.prepare_values(x) for a in attentions], dim=1)
        real = src_mask.transpose(1, 2).to(x.dtype)  # (B, S, 1)
        summary = (x * real).sum(1) / real.sum(1)
        return Memory(keys, values, src_mask, summary)

    def decode(
        self,
        memory: Memory,
        x: Tensor,
        self_mask: Tensor,
        steps: Tensor,
        caches: list[tuple[Tensor, Tensor, int]] | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """The decoder stack over embedded targets `x` at positions `steps` (B, T); with
        `caches`, one step (T = 1) that writes into each layer's (see `self_attend`). With
        `need_weights`, the attention of `alignment_layer` (its aligning heads) too."""
        source_positions = self.source_positions(steps)
        kept = None
        for i, layer in enumerate(self.decoder_layers):
            x, weights = self.run_layer(
                layer,
                x,
                self_mask,
                steps,
                memory,
                i,
                source_positions,
                None if caches is None else caches[i],
                need_weights and i == self.alignment_layer,
            )
            kept = kept if weights is None else weights
        return self.decoder_norm(x), self.aligning(kept, 1)

    def init_state(self, memory: Memory) -> TransformerState:
        rows = memory.rows
        # Each layer's prepared keys and values of no position: their width, per type.
        empty = memory.summary.new_zeros(rows, 0, self.dim)
        layers = [layer.self_attention for layer in self.decoder_layers]

        def buffer(prepared: Tensor) -> Tensor:
            return prepared.new_empty(INITIAL_CACHE_LENGTH, rows, prepared.size(-1))

        buffers = CacheBuffers(
            [buffer(a.prepare_keys(empty)) for a in layers],
            [buffer(a.prepare_values(empty)) for a in layers],
            0,
        )
        return TransformerState(buffers, 0, memory.mask.new_zeros(rows, dtype=torch.long))

    def decode_step(
        self,
        memory: Memory,
        state: TransformerState,
        prev_tokens: Tensor,
        need_weights: bool = True,
    ) -> Step:
        steps = state.step.unsqueeze(1)
        past = state.length
        x = self.tgt_embed(prev_tokens.unsqueeze(1), steps, past + 1)
        # The new token sees every cached position and itself.
        self_mask = memory.mask.new_ones(x.size(0), 1, past + 1)
        buffers = state.writable()
        caches = [(k, v, past) for k, v in zip(buffers.keys, buffers.values, strict=True)]
        x, weights = self.decode(memory, x, self_mask, steps, caches, need_weights)
        buffers.filled = past + 1
        log_probs = torch.log_softmax(self.output(x[:, 0]), dim=-1)
        state = TransformerState(buffers, past + 1, state.step + 1)
        return Step(log_probs, state, None if weights is None else weights.squeeze(-2))

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        memory = self.encode(src, src_mask)
        logits = self.tied_to_choices(self.teacher_forced(memory, tgt_in, self.keeps_attention))
        if self.needs_soft_baseline():  # its dropout masks are drawn anew
            with torch.no_grad(), attending_softly(self):
                self.baseline_logits = self.teacher_forced(memory, tgt_in)
        return logits

    def teacher_forced(self, memory: Memory, tgt_in: Tensor, keep: bool = False) -> Tensor:
        """The decoder's logits (B, T, V) over the encoded source for target inputs (B, T);
        `keep`: the model's attention kept (`keep_attention`)."""
        batch, length = tgt_in.shape
        steps = torch.arange(length, device=tgt_in.device).expand(batch, length)
        x = self.tgt_embed(tgt_in, steps, length)
        # Causal: position t attends to 0..t. Padding sits after the real tokens, so a
        # real position never sees it; padded positions are ignored by the loss.
        causal = torch.ones(length, length, dtype=torch.bool, device=tgt_in.device).tril()
        x, weights = self.decode(memory, x, causal.expand(batch, -1, -1), steps, None, keep)
        if keep:  # (B, [H,] T, S)
            self.keep_attention(weights, 1)
        return self.output(x)
