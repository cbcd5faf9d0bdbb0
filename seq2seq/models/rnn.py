"""Attentional RNN encoder-decoder (Bahdanau et al., 2015; Luong et al., 2015).

The encoder is a (bi)directional multi-layer LSTM or GRU. The decoder's wiring follows
the attention type: Bahdanau-style types attend with the previous decoder state before
the cell and feed the context into it; Luong-style types attend with the new state after
the cell and feed the attentional vector into the next step (input feeding). Attention
gets the decoder step t of each row, mapped onto the source, as its query position
(local-m centres on it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from seq2seq.attention import build_attention
from seq2seq.attention.hard import PositionChoice, choice_loss
from seq2seq.config import ModelConfig
from seq2seq.models.base import Memory, Seq2Seq, Step
from seq2seq.models.dropout import Dropout
from seq2seq.models.marginal import marginal_log_probs
from seq2seq.models.recurrent import StepLSTM

_CELLS = {"lstm": nn.LSTM, "gru": nn.GRU}
_DECODER_CELLS = {"lstm": StepLSTM, "gru": nn.GRU}  # a step at a time


@dataclass
class RNNState:
    hidden: Tensor  # (L, B, H)
    cell: Tensor | None  # (L, B, H) for LSTM, None for GRU
    feed: Tensor  # (B, H): the last attentional vector (Luong) or context (Bahdanau)
    step: Tensor  # (B,) long: the decoder time step t, the attention's query position

    def index_select(self, index: Tensor) -> RNNState:
        cell = None if self.cell is None else self.cell[:, index]
        return RNNState(self.hidden[:, index], cell, self.feed[index], self.step[index])

    def rnn_state(self) -> Tensor | tuple[Tensor, Tensor]:
        return self.hidden if self.cell is None else (self.hidden, self.cell)


class DecoderStep(NamedTuple):
    attentional: Tensor  # (B, H) tanh(W_c [h; c]) of the expected context c
    state: RNNState
    weights: Tensor | None  # (B, S) or (B, heads, S); None if not asked for and skipped
    output: Tensor  # (B, 1, H) the cell's output h


class RNNEncoder(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int, pad_id: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, cfg.embed_dim, padding_idx=pad_id)
        self.dropout = Dropout(cfg.dropout)
        self.rnn = _CELLS[cfg.cell](
            cfg.embed_dim,
            cfg.hidden_dim,
            num_layers=cfg.encoder_layers,
            batch_first=True,
            bidirectional=cfg.bidirectional,
            dropout=cfg.dropout if cfg.encoder_layers > 1 else 0.0,
        )
        self.output_dim = cfg.hidden_dim * (2 if cfg.bidirectional else 1)

    def forward(self, src: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """-> outputs (B, S, output_dim) and the top layer's final state (B, output_dim)."""
        packed = pack_padded_sequence(
            self.dropout(self.embed(src)), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        outputs, final = self.rnn(packed)
        outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=src.size(1))
        hidden = final[0] if isinstance(final, tuple) else final
        directions = 2 if self.rnn.bidirectional else 1
        top = hidden[-directions:]  # (directions, B, H)
        return self.dropout(outputs), torch.cat(list(top), dim=-1)


class RNNDecoder(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int, encoder_dim: int, pad_id: int) -> None:
        super().__init__()
        hidden = cfg.hidden_dim
        self.layers = cfg.decoder_layers
        self.embed = nn.Embedding(vocab_size, cfg.embed_dim, padding_idx=pad_id)
        self.dropout = Dropout(cfg.dropout)
        # Normalised so that every score starts from keys and values of unit scale: raw
        # encoder states are small at initialisation, and types that add projections
        # (multi-head) or ignore content (location) then hardly learn to attend at all.
        self.memory_proj = nn.Sequential(
            nn.Linear(encoder_dim, hidden, bias=False), nn.LayerNorm(hidden)
        )
        self.bridge = nn.Linear(encoder_dim, hidden * cfg.decoder_layers)
        section, hard = cfg.attention, cfg.attention.is_hard
        # Hard attention: the module attends softly, and `choice` chooses at the prediction.
        soft = section.model_copy(update={"normalizer": "softmax"}) if hard else section
        self.attention = build_attention(soft, hidden, hidden, cfg.heads(section))
        self.choice = PositionChoice(section.hard) if hard else None
        self.rnn = _DECODER_CELLS[cfg.cell](
            cfg.embed_dim + hidden,
            hidden,
            num_layers=cfg.decoder_layers,
            batch_first=True,
            dropout=cfg.dropout if cfg.decoder_layers > 1 else 0.0,
        )
        self.combine = nn.Linear(2 * hidden, hidden)
        self.output = nn.Linear(hidden, vocab_size, bias=False)
        if cfg.tied_embeddings:
            self.output.weight = self.embed.weight
        self.is_lstm = cfg.cell == "lstm"

    def memory(self, outputs: Tensor, final: Tensor, src_mask: Tensor) -> Memory:
        values = self.memory_proj(outputs)
        keys, values = self.attention.prepare_keys(values), self.attention.prepare_values(values)
        return Memory(keys, values, src_mask, final)

    def init_state(self, memory: Memory) -> RNNState:
        hidden = torch.tanh(self.bridge(memory.summary)).repeat_interleave(memory.beam, dim=0)
        hidden = hidden.view(memory.rows, self.layers, -1).transpose(0, 1).contiguous()
        cell = torch.zeros_like(hidden) if self.is_lstm else None
        step = torch.zeros(memory.rows, dtype=torch.long, device=hidden.device)
        return RNNState(hidden, cell, hidden.new_zeros(memory.rows, hidden.size(-1)), step)

    def step(
        self,
        memory: Memory,
        state: RNNState,
        embedded: Tensor,
        positions: Tensor,
        need_weights: bool = True,
    ) -> DecoderStep:
        """One step from the embedded previous token (B, E): its attentional vector, the
        next state, the attention weights (always, with hard attention) and the cell output.

        `positions` (B, 1) is the source position the step maps to (see Seq2Seq).
        """
        need_weights = need_weights or self.choice is not None
        if self.attention.attends_before_cell:
            query = state.hidden[-1].unsqueeze(1)
            context, weights = memory.attend(self.attention, query, positions, need_weights)
            rnn_input = torch.cat([embedded, context.squeeze(1)], dim=-1)
            output, rnn_state = self.rnn(rnn_input.unsqueeze(1), state.rnn_state())
        else:
            rnn_input = torch.cat([embedded, state.feed], dim=-1)
            output, rnn_state = self.rnn(rnn_input.unsqueeze(1), state.rnn_state())
            context, weights = memory.attend(self.attention, output, positions, need_weights)
        attentional = torch.tanh(self.combine(torch.cat([output, context], dim=-1))).squeeze(1)
        attentional = self.dropout(attentional)
        hidden, cell = rnn_state if self.is_lstm else (rnn_state, None)
        feed = context.squeeze(1) if self.attention.attends_before_cell else attentional
        next_state = RNNState(hidden, cell, feed, state.step + 1)
        weights = None if weights is None else weights.squeeze(-2)
        return DecoderStep(attentional, next_state, weights, output)

    def predict(self, output: Tensor, context: Tensor) -> Tensor:
        """Logits W_o dropout(tanh(W_c [h; c])) of cell outputs and contexts (..., H)."""
        combined = self.combine(torch.cat([output, context], dim=-1))
        return self.output(self.dropout(torch.tanh(combined)))

    def hard_prediction(self, memory: Memory, outputs: Tensor, p: Tensor) -> tuple[Tensor, Tensor]:
        """Hard attention's logits (R, T, V) from the cell outputs (R, T, H) and position
        distributions (R, T, S) of rows reading `memory`, and the weights they read: the
        choice's, or p where it sums over the positions (then the logits are the
        marginal's log-probabilities)."""
        values = memory.row_values()
        weights = self.choice(p)
        if self.choice.sums:
            vocab = self.output.out_features
            return marginal_log_probs(self.predict, outputs, values, weights, vocab), weights
        return self.predict(outputs, torch.bmm(weights, values)), weights


class RNNSeq2Seq(Seq2Seq):
    # Packing reads the source lengths on the host, and its layout depends on them.
    graph_capturable = False

    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int, pad_id: int) -> None:
        super().__init__()
        self.encoder = RNNEncoder(cfg, src_vocab, pad_id)
        self.decoder = RNNDecoder(cfg, tgt_vocab, self.encoder.output_dim, pad_id)
        if cfg.shared_embeddings:
            self.encoder.embed.weight = self.decoder.embed.weight
        self.choice_loss = choice_loss(cfg.attention, reaches_later=False)
        self.set_alignment_heads(cfg)

    def encode(self, src: Tensor, src_mask: Tensor) -> Memory:
        outputs, final = self.encoder(src, src_mask[:, 0].sum(-1))
        return self.decoder.memory(outputs, final, src_mask)

    def init_state(self, memory: Memory) -> RNNState:
        return self.decoder.init_state(memory)

    def decode_step(
        self, memory: Memory, state: RNNState, prev_tokens: Tensor, need_weights: bool = True
    ) -> Step:
        decoder = self.decoder
        embedded = decoder.dropout(decoder.embed(prev_tokens))
        positions = self.source_positions(state.step.unsqueeze(1))
        step = decoder.step(memory, state, embedded, positions, need_weights)
        if decoder.choice is None:
            logits, weights = decoder.output(step.attentional), step.weights
        else:
            logits, weights = decoder.hard_prediction(
                memory, step.output, step.weights.unsqueeze(1)
            )
            logits, weights = logits[:, 0], weights[:, 0]
        return Step(torch.log_softmax(logits, dim=-1), step.state, self.aligning(weights, 1))

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        memory = self.encode(src, src_mask)
        state = self.init_state(memory)
        decoder = self.decoder
        embedded = decoder.dropout(decoder.embed(tgt_in))
        steps = []
        # unbind, not embedded[:, t]: the backward of each index would fill a zero tensor
        # of the whole (B, T, E) input, T times over.
        for step_input in embedded.unbind(1):
            positions = self.source_positions(state.step.unsqueeze(1))
            step = decoder.step(memory, state, step_input, positions, self.keeps_attention)
            state = step.state
            steps.append(step)
        if self.keeps_attention:  # (B, T, [H,] S)
            weights = torch.stack([step.weights for step in steps], dim=1)
            self.keep_attention(self.aligning(weights, 2), 2)
        if decoder.choice is None:
            return decoder.output(torch.stack([step.attentional for step in steps], dim=1))
        if self.needs_soft_baseline():  # the same pass's soft attentional vectors
            with torch.no_grad():
                soft = torch.stack([step.attentional for step in steps], dim=1)
                self.baseline_logits = decoder.output(soft)
        outputs = torch.cat([step.output for step in steps], dim=1)
        p = torch.stack([step.weights for step in steps], dim=1)
        return self.tied_to_choices(decoder.hard_prediction(memory, outputs, p)[0])
