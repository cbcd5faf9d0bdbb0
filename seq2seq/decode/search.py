"""Beam search over the `Seq2Seq` contract, batched over sentences and beams at once.

The B sentences x K beams of a batch are B*K rows of one decoder batch. At each step
every live row proposes its V continuations; each sentence keeps the K best of its K*V
by summed log-probability. A continuation that ends in EOS is finished: it is scored
with the GNMT length penalty (Wu et al., 2016),

    score = log P(y) / lp(y),  lp(y) = ((5 + |y|) / 6) ** alpha  (|y| counts the EOS),

and its beam slot closes, so the beam narrows as hypotheses finish (with K = 1 this is
greedy search exactly). A sentence is done when no slot is open, or when it has its
n-best finished and no open hypothesis can still beat them: log-probabilities only fall,
so an open one scores at most log P / lp(longest allowed length). Rows reorder their
decoder state by index (`index_select`); finished hypotheses are read back through
back-pointers at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.models.base import Seq2Seq


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    score: float  # log-probability over the length penalty
    attention: Tensor  # (len(tokens) + 1 for EOS, [heads,] source length)


def output_limits(src_lengths: Tensor, ratio: float, offset: int) -> Tensor:
    """Per-sentence maximum number of target tokens (EOS included)."""
    return (src_lengths.float() * ratio).ceil().long() + offset


def length_penalty(lengths: Tensor, alpha: float) -> Tensor:
    return ((5.0 + lengths) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    src_mask: Tensor,
    max_lengths: Tensor,
    bos_id: int,
    eos_id: int,
    beam: int = 1,
    nbest: int = 1,
    alpha: float = 0.0,
    min_length: int = 0,
) -> list[list[Hypothesis]]:
    """The `nbest` best hypotheses of each sentence, best first.

    `max_lengths` (B,) caps each output (EOS included; EOS is forced at the cap);
    `min_length` tokens come before EOS may (unless the cap comes first).
    """
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest must be between 1 and the beam size {beam}, got {nbest}")
    batch, device = src.size(0), src.device
    rows = batch * beam
    sentence_of_row = torch.arange(batch, device=device).repeat_interleave(beam)
    memory = model.encode(src, src_mask)
    memory = memory.index_select(sentence_of_row) if beam > 1 else memory
    state = model.init_state(memory)
    max_lengths = max_lengths.to(device)
    longest = length_penalty(max_lengths.float(), alpha)  # (B,): the bound's denominator
    # Summed log-probabilities of the open slots; -inf marks a closed (or unused) slot.
    scores = torch.full((batch, beam), float("-inf"), device=device)
    scores[:, 0] = 0.0
    prev = torch.full((rows,), bos_id, dtype=torch.long, device=device)
    first_row = (torch.arange(batch, device=device) * beam).unsqueeze(1)  # (B, 1)
    best_finished = torch.full((batch, nbest), float("-inf"), device=device)
    tokens, origins, weights = [], [], []  # per step: slot tokens, back-pointers, attention
    finished: list[list[tuple[float, int, int]]] = [[] for _ in range(batch)]
    for t in range(int(max_lengths.max())):
        step = model.decode_step(memory, state, prev)
        log_probs = step.log_probs.float()
        vocab = log_probs.size(-1)
        # At its length cap a row may only end, at EOS's own probability; below the
        # minimum length it may not end, unless the cap comes first.
        at_cap = (max_lengths <= t + 1).repeat_interleave(beam)
        eos = log_probs[:, eos_id].clone()
        if t < min_length:
            eos = eos.masked_fill(~at_cap, float("-inf"))
        log_probs = log_probs.masked_fill(at_cap.unsqueeze(1), float("-inf"))
        log_probs[:, eos_id] = eos
        candidates = (scores.view(rows, 1) + log_probs).view(batch, beam * vocab)
        top_scores, top_index = candidates.topk(beam, dim=1)  # (B, K), best first
        origin = (top_index // vocab + first_row).view(rows)  # the row each slot extends
        token = (top_index % vocab).view(rows)
        ends = (token == eos_id).view(batch, beam) & top_scores.isfinite()

        if bool(ends.any()):
            lengths = torch.full_like(top_scores, t + 1.0)
            final = torch.where(ends, top_scores / length_penalty(lengths, alpha), -torch.inf)
            both = torch.cat([best_finished, final], dim=1)
            best_finished = both.topk(nbest, dim=1).values
            for b, k in ends.nonzero().tolist():
                finished[b].append((float(final[b, k]), t, b * beam + k))
        scores = top_scores.masked_fill(ends, float("-inf"))
        tokens.append(token)
        origins.append(origin)
        weights.append(step.attention)

        bound = (scores / longest.unsqueeze(1)).amax(dim=1)  # best an open slot can reach
        done = bound <= best_finished[:, -1]  # also when no slot is open: -inf <= x
        if bool(done.all()):
            break
        scores = scores.masked_fill(done.unsqueeze(1), float("-inf"))
        # With one beam every slot extends its own row: nothing to reorder.
        state = step.state.index_select(origin) if beam > 1 else step.state
        prev = token
    return _read_back(finished, tokens, origins, weights, src_mask, nbest)


def _read_back(
    finished: list[list[tuple[float, int, int]]],
    tokens: list[Tensor],
    origins: list[Tensor],
    weights: list[Tensor],
    src_mask: Tensor,
    nbest: int,
) -> list[list[Hypothesis]]:
    """Follow back-pointers from each kept hypothesis's EOS slot to its first token.

    At step s, slot j holds token `tokens[s][j]` and extends row `origins[s][j]` of the
    rows decoded at step s, whose attention is `weights[s][origins[s][j]]`.
    """
    token_rows = torch.stack(tokens).cpu()  # (T, B*K)
    origin_rows = torch.stack(origins).cpu()
    weight_rows = [w.float().cpu() for w in weights]
    src_lengths = src_mask[:, 0].sum(-1).tolist()

    def trace(sentence: int, score: float, last_step: int, slot: int) -> Hypothesis:
        path, attention = [], []
        for s in range(last_step, -1, -1):
            path.append(int(token_rows[s, slot]))
            slot = int(origin_rows[s, slot])
            attention.append(weight_rows[s][slot, ..., : src_lengths[sentence]])
        return Hypothesis(path[::-1][:-1], score, torch.stack(attention[::-1]))

    return [
        [trace(b, *hyp) for hyp in sorted(hyps, key=lambda h: -h[0])[:nbest]]
        for b, hyps in enumerate(finished)
    ]
