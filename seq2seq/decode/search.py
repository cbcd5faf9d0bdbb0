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
decoder state by index (`index_select`); once a quarter of the batch's sentences are
done, they leave it; finished hypotheses are read back through back-pointers at the end.
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
    memory = model.encode(src, src_mask)
    if beam > 1:
        memory = memory.index_select(torch.arange(batch, device=device).repeat_interleave(beam))
    state = model.init_state(memory)
    # Per active sentence (finished sentences leave the batch): its index in the input,
    # length cap, the bound's denominator, and the n best finished scores so far.
    sentences = torch.arange(batch, device=device)
    max_lengths = max_lengths.to(device)
    longest = length_penalty(max_lengths.float(), alpha)
    best_finished = torch.full((batch, nbest), float("-inf"), device=device)
    # Summed log-probabilities of the open slots; -inf marks a closed (or unused) slot.
    scores = torch.full((batch, beam), float("-inf"), device=device)
    scores[:, 0] = 0.0
    prev = torch.full((batch * beam,), bos_id, dtype=torch.long, device=device)
    # Per step, for reading hypotheses back: each slot's token and the input row it
    # extends, each input row's attention, and the previous step's slot of each input
    # row (None: the same index, as no sentence left the batch in between).
    trail = _Trail([], [], [], [])
    slots_of_inputs: Tensor | None = None
    finished: list[list[tuple[float, int, int]]] = [[] for _ in range(batch)]
    for t in range(int(max_lengths.max())):
        active = scores.size(0)
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
        candidates = (scores.view(-1, 1) + log_probs).view(active, beam * vocab)
        top_scores, top_index = candidates.topk(beam, dim=1)  # (A, K), best first
        first_row = (torch.arange(active, device=device) * beam).unsqueeze(1)
        origin = (top_index // vocab + first_row).view(-1)  # the input row each slot extends
        token = (top_index % vocab).view(-1)
        ends = (token == eos_id).view(active, beam) & top_scores.isfinite()
        if bool(ends.any()):
            lengths = torch.full_like(top_scores, t + 1.0)
            final = torch.where(ends, top_scores / length_penalty(lengths, alpha), -torch.inf)
            best_finished = torch.cat([best_finished, final], dim=1).topk(nbest, dim=1).values
            for a, k in ends.nonzero().tolist():
                finished[int(sentences[a])].append((float(final[a, k]), t, a * beam + k))
        scores = top_scores.masked_fill(ends, float("-inf"))
        trail.append(token, origin, step.attention, slots_of_inputs)

        bound = (scores / longest.unsqueeze(1)).amax(dim=1)  # best an open slot can reach
        done = bound <= best_finished[:, -1]  # also when no slot is open: -inf <= x
        if bool(done.all()):
            break
        scores = scores.masked_fill(done.unsqueeze(1), float("-inf"))
        reorder, slots_of_inputs = origin, None
        if int(done.sum()) * 4 >= active:  # enough are done: drop them from the batch
            keep = (~done).nonzero().squeeze(1)
            slots_of_inputs = (keep.unsqueeze(1) * beam + torch.arange(beam, device=device)).view(
                -1
            )
            sentences, max_lengths, longest = sentences[keep], max_lengths[keep], longest[keep]
            best_finished, scores = best_finished[keep], scores[keep]
            memory = memory.index_select(slots_of_inputs)
            reorder, token = origin[slots_of_inputs], token[slots_of_inputs]
        # With one beam and nobody gone, every slot extends its own row: nothing to move.
        if beam > 1 or slots_of_inputs is not None:
            state = step.state.index_select(reorder)
        else:
            state = step.state
        prev = token
    return trail.read_back(finished, src_mask, nbest)


@dataclass
class _Trail:
    """What each step leaves behind for reading the finished hypotheses back."""

    tokens: list[Tensor]  # (slots,) the token of each slot
    origins: list[Tensor]  # (slots,) the input row each slot extends
    weights: list[Tensor]  # (input rows, [heads,] S) attention of each input row
    slots_of_inputs: list[Tensor | None]  # (input rows,) the previous step's slot of each

    def append(self, tokens: Tensor, origins: Tensor, weights: Tensor, slots: Tensor | None):
        self.tokens.append(tokens.cpu())
        self.origins.append(origins.cpu())
        self.weights.append(weights.float().cpu())
        self.slots_of_inputs.append(None if slots is None else slots.cpu())

    def read_back(
        self, finished: list[list[tuple[float, int, int]]], src_mask: Tensor, nbest: int
    ) -> list[list[Hypothesis]]:
        """Follow back-pointers from each kept hypothesis's EOS slot to its first token."""
        src_lengths = src_mask[:, 0].sum(-1).tolist()

        def trace(sentence: int, score: float, last_step: int, slot: int) -> Hypothesis:
            path, attention = [], []
            for s in range(last_step, -1, -1):
                path.append(int(self.tokens[s][slot]))
                row = int(self.origins[s][slot])
                attention.append(self.weights[s][row, ..., : src_lengths[sentence]])
                slots = self.slots_of_inputs[s]
                slot = row if slots is None else int(slots[row])
            return Hypothesis(path[::-1][:-1], score, torch.stack(attention[::-1]))

        return [
            [trace(b, *hyp) for hyp in sorted(hyps, key=lambda h: -h[0])[:nbest]]
            for b, hyps in enumerate(finished)
        ]
