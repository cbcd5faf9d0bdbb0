"""Search over the `Seq2Seq` contract, batched over sentences: greedy decoding."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.models.base import Seq2Seq


@dataclass
class Hypotheses:
    tokens: list[list[int]]  # per sentence, without BOS and EOS
    attention: list[Tensor]  # per sentence, (target length + 1 for EOS, source length)


def output_limits(src_lengths: Tensor, ratio: float, offset: int) -> Tensor:
    """Per-sentence maximum number of target tokens (EOS included)."""
    return (src_lengths.float() * ratio).ceil().long() + offset


@torch.no_grad()
def greedy(
    model: Seq2Seq,
    src: Tensor,
    src_mask: Tensor,
    max_lengths: Tensor,
    bos_id: int,
    eos_id: int,
) -> Hypotheses:
    """Pick the most probable token at each step, for the whole batch at once."""
    batch = src.size(0)
    memory = model.encode(src, src_mask)
    state = model.init_state(memory)
    prev = torch.full((batch,), bos_id, dtype=torch.long, device=src.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    max_lengths = max_lengths.to(src.device)
    tokens, weights = [], []
    for t in range(int(max_lengths.max())):
        step = model.decode_step(memory, state, prev)
        state = step.state
        prev = step.log_probs.argmax(dim=-1)
        # A sentence at its length limit is forced to end.
        prev = torch.where(max_lengths <= t + 1, torch.full_like(prev, eos_id), prev)
        prev = prev.masked_fill(finished, eos_id)
        tokens.append(prev)
        weights.append(step.attention)
        finished |= prev == eos_id
        if bool(finished.all()):
            break
    token_matrix = torch.stack(tokens, dim=1).tolist()
    weight_matrix = torch.stack(weights, dim=1).float().cpu()
    src_lengths = src_mask[:, 0].sum(-1).tolist()
    out_tokens, out_weights = [], []
    for row, sentence in enumerate(token_matrix):
        length = sentence.index(eos_id) if eos_id in sentence else len(sentence)
        out_tokens.append(sentence[:length])
        out_weights.append(weight_matrix[row, : length + 1, ..., : src_lengths[row]])
    return Hypotheses(out_tokens, out_weights)
