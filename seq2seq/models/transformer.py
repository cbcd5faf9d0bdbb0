"""Transformer encoder-decoder (Vaswani et al., 2017) with attention from the registry.

Self-attention is `model.self_attention` (scaled-dot, multi-head, by default) and the
decoder's cross-attention is `model.attention`, each multi-head over its score (4 heads
unless `heads` says otherwise). Every sublayer is residual, with its layer norm before
(`norm: pre`, plus a final norm) or after (`norm: post`, the paper's) the residual sum.

Attention positions: a query at position t attends to itself at t in self-attention,
and maps onto the source at t * length_ratio in cross-attention (see `Seq2Seq`).

Incremental decoding caches each layer's self-attention keys and values: a step embeds
one token, appends its keys and values to the cache and attends over the cache, so it
computes what the teacher-forced pass computes for that position under the causal mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seq2seq.attention import Attention, build_attention
from seq2seq.config import ModelConfig
from seq2seq.models.base import Memory, Seq2Seq, Step
from seq2seq.models.dropout import Dropout


@dataclass
class TransformerState:
    keys: list[Tensor]  # per decoder layer, (B, t, Dk): self-attention keys so far
    values: list[Tensor]  # per decoder layer, (B, t, Dv)
    step: Tensor  # (B,) long: the position of the next token

    def index_select(self, index: Tensor) -> TransformerState:
        return TransformerState(
            [k[index] for k in self.keys], [v[index] for v in self.values], self.step[index]
        )


def sinusoids(length: int, dim: int) -> Tensor:
    """(length, dim) sinusoidal position encodings: sin and cos of pos / 10000^(2i/dim)."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    rate = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)[:, : dim // 2]
    return table


class Embedding(nn.Module):
    """Token embedding times sqrt(d), plus sinusoidal positions, then dropout."""

    def __init__(self, vocab_size: int, dim: int, pad_id: int, dropout: float) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
        nn.init.normal_(self.tokens.weight, std=dim**-0.5)
        with torch.no_grad():
            self.tokens.weight[pad_id].zero_()
        self.scale = math.sqrt(dim)
        self.register_buffer("positions", sinusoids(1024, dim), persistent=False)
        self.dropout = Dropout(dropout)

    def forward(self, tokens: Tensor, positions: Tensor, length: int) -> Tensor:
        """`tokens` (B, T) at `positions` (B, T), all below `length` -> (B, T, d).

        `length` comes from tensor shapes, so checking the table needs no device sync.
        """
        if length > self.positions.size(0):
            table = sinusoids(2 * length, self.positions.size(1))
            self.positions = table.to(self.positions.device)
        return self.dropout(self.tokens(tokens) * self.scale + self.positions[positions])


class Sublayer(nn.Module):
    """A residual block around `fn` with layer norm before (pre) or after (post) the sum."""

    def __init__(self, dim: int, pre_norm: bool, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.pre_norm = pre_norm
        self.dropout = Dropout(dropout)

    def function_input(self, x: Tensor) -> Tensor:
        """What the wrapped function reads: the normalised x (pre-norm) or x itself."""
        return self.norm(x) if self.pre_norm else x

    def add_output(self, x: Tensor, fx: Tensor) -> Tensor:
        """The residual sum x + dropout(f(x)), normalised afterwards under post-norm."""
        x = x + self.dropout(fx)
        return x if self.pre_norm else self.norm(x)


class FeedForward(nn.Sequential):
    """linear(dim -> inner), ReLU, dropout, linear(inner -> dim). A `Sequential`, so that
    parameters keep the names checkpoints hold (feed_forward.0, feed_forward.3)."""

    def __init__(self, dim: int, inner: int, dropout: float) -> None:
        super().__init__(nn.Linear(dim, inner), nn.ReLU(), Dropout(dropout), nn.Linear(inner, dim))

    @property
    def expand(self) -> nn.Linear:
        return self[0]

    @property
    def contract(self) -> nn.Linear:
        return self[3]


def self_attend(
    attention: Attention,
    h: Tensor,
    mask: Tensor,
    positions: Tensor,
    cache: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """Self-attention of `h` (B, T, d) over itself, after the cached keys and values if any.

    Returns the context and the keys and values to cache for the next step.
    """
    keys, values = attention.prepare_keys(h), attention.prepare_values(h)
    if cache is not None:
        keys, values = torch.cat([cache[0], keys], dim=1), torch.cat([cache[1], values], dim=1)
    context = attention.attend(h, keys, values, mask, positions, need_weights=False).context
    return context, (keys, values)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        dim, pre, dropout = cfg.hidden_dim, cfg.norm == "pre", cfg.dropout
        self.self_attention = build_attention(
            cfg.self_attention, dim, dim, cfg.heads(cfg.self_attention)
        )
        self.feed_forward = FeedForward(dim, cfg.ff_dim, dropout)
        self.attention_block = Sublayer(dim, pre, dropout)
        self.feed_forward_block = Sublayer(dim, pre, dropout)

    def forward(self, x: Tensor, mask: Tensor, positions: Tensor) -> Tensor:
        block = self.attention_block
        context, _ = self_attend(self.self_attention, block.function_input(x), mask, positions)
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
        self.feed_forward = FeedForward(dim, cfg.ff_dim, dropout)
        self.self_attention_block = Sublayer(dim, pre, dropout)
        self.cross_attention_block = Sublayer(dim, pre, dropout)
        self.feed_forward_block = Sublayer(dim, pre, dropout)

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor,
        positions: Tensor,
        memory: tuple[Tensor, Tensor, Tensor],
        source_positions: Tensor,
        cache: tuple[Tensor, Tensor] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, tuple[Tensor, Tensor], Tensor | None]:
        """-> new x, this layer's self-attention cache, cross-attention weights (if asked)."""
        block = self.self_attention_block
        context, cache = self_attend(
            self.self_attention, block.function_input(x), self_mask, positions, cache
        )
        x = block.add_output(x, context)
        block = self.cross_attention_block
        keys, values, mask = memory
        context, weights = self.cross_attention.attend(
            block.function_input(x), keys, values, mask, source_positions, need_weights
        )
        x = block.add_output(x, context)
        block = self.feed_forward_block
        return block.add_output(x, self.feed_forward(block.function_input(x))), cache, weights


class TransformerSeq2Seq(Seq2Seq):
    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int, pad_id: int) -> None:
        super().__init__()
        dim = cfg.hidden_dim
        self.src_embed = Embedding(src_vocab, dim, pad_id, cfg.dropout)
        self.tgt_embed = Embedding(tgt_vocab, dim, pad_id, cfg.dropout)
        if cfg.shared_embeddings:
            self.src_embed.tokens.weight = self.tgt_embed.tokens.weight
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        # Pre-norm leaves each stack's output unnormalised: one final norm per stack.
        pre = cfg.norm == "pre"
        self.encoder_norm = nn.LayerNorm(dim) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(dim) if pre else nn.Identity()
        self.output = nn.Linear(dim, tgt_vocab, bias=False)
        for layer in [*self.encoder_layers, *self.decoder_layers]:
            for module in layer.modules():
                if isinstance(module, nn.Linear):
                    nn.init.xavier_uniform_(module.weight)
        if cfg.tied_embeddings:
            self.output.weight = self.tgt_embed.tokens.weight
        self.dim = dim

    def encode(self, src: Tensor, src_mask: Tensor) -> Memory:
        steps = torch.arange(src.size(1), device=src.device).expand_as(src)
        x = self.src_embed(src, steps, src.size(1))
        for layer in self.encoder_layers:
            x = layer(x, src_mask, steps)
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
        caches: list[tuple[Tensor, Tensor]] | None,
        need_weights: bool,
    ) -> tuple[Tensor, list[tuple[Tensor, Tensor]], Tensor | None]:
        """The decoder stack over embedded targets `x` at positions `steps` (B, T)."""
        source_positions = self.source_positions(steps)
        new_caches, weights = [], None
        for i, layer in enumerate(self.decoder_layers):
            x, cache, weights = layer(
                x,
                self_mask,
                steps,
                (memory.keys[:, i], memory.values[:, i], memory.mask),
                source_positions,
                None if caches is None else caches[i],
                need_weights and i == len(self.decoder_layers) - 1,
            )
            new_caches.append(cache)
        return self.decoder_norm(x), new_caches, weights

    def init_state(self, memory: Memory) -> TransformerState:
        batch = memory.mask.size(0)
        empty = memory.summary.new_zeros(batch, 0, self.dim)
        layers = [layer.self_attention for layer in self.decoder_layers]
        return TransformerState(
            [a.prepare_keys(empty) for a in layers],
            [a.prepare_values(empty) for a in layers],
            torch.zeros(batch, dtype=torch.long, device=memory.mask.device),
        )

    def decode_step(
        self,
        memory: Memory,
        state: TransformerState,
        prev_tokens: Tensor,
        need_weights: bool = True,
    ) -> Step:
        steps = state.step.unsqueeze(1)
        past = state.keys[0].size(1)  # every row is at the same step: the cache length
        x = self.tgt_embed(prev_tokens.unsqueeze(1), steps, past + 1)
        # The new token sees every cached position and itself.
        self_mask = memory.mask.new_ones(x.size(0), 1, past + 1)
        caches = list(zip(state.keys, state.values, strict=True))
        x, caches, weights = self.decode(memory, x, self_mask, steps, caches, need_weights)
        log_probs = torch.log_softmax(self.output(x[:, 0]), dim=-1)
        state = TransformerState([k for k, _ in caches], [v for _, v in caches], state.step + 1)
        return Step(log_probs, state, None if weights is None else weights.squeeze(-2))

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        memory = self.encode(src, src_mask)
        batch, length = tgt_in.shape
        steps = torch.arange(length, device=tgt_in.device).expand(batch, length)
        x = self.tgt_embed(tgt_in, steps, length)
        # Causal: position t attends to 0..t. Padding sits after the real tokens, so a
        # real position never sees it; padded positions are ignored by the loss.
        causal = torch.ones(length, length, dtype=torch.bool, device=tgt_in.device).tril()
        x, _, _ = self.decode(memory, x, causal.expand(batch, -1, -1), steps, None, False)
        return self.output(x)
