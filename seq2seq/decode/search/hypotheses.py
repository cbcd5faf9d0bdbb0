"""What a search finds and how it is read back: each hypothesis (`Hypothesis`), and the
`Trail` that the search's steps leave on the device, followed back from each finished
hypothesis's EOS to its first token once the search is over."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    score: float  # log-probability over the length penalty (plus the coverage penalty)
    # (len(tokens) + 1 for EOS, [heads,] source length); None when not asked for
    attention: Tensor | None
    # the log-probability of each token and of the EOS; None when not asked for
    token_scores: list[float] | None = None


@dataclass
class Trail:
    """What each step leaves behind for reading the finished hypotheses back."""

    # Kept where the search computes them, and read back once at the end: a copy per step
    # would make a GPU's host wait for the device at every step.
    # A step's slots are its candidates, C per sentence (`strategy.Strategy.candidates`):
    # the finished ones and those the next step's rows extend.
    tokens: list[Tensor]  # (slots,) the token of each slot
    origins: list[Tensor]  # (slots,) the input row each slot extends
    weights: list[Tensor | None]  # (input rows, [heads,] S) attention of each input row
    # (input rows,) each input row's slot at the step before; None: the same index, as no
    # sentence left the batch and each slot went on in its own row (`loop._next_beams`)
    previous_slots: list[Tensor | None]
    # per sentence, (score, step, slot) of each hypothesis finished so far
    finished: list[list[tuple[float, int, int]]]
    scores: list[Tensor] | None  # (slots,) each slot's summed log-probability, if kept
    keeps_attention: bool = True

    @classmethod
    def start(cls, sentences: int, attention: bool = True, token_scores: bool = False) -> Trail:
        """An empty trail, which keeps each step's attention (`attention`) and scores
        (`token_scores`) if asked to."""
        finished: list[list[tuple[float, int, int]]] = [[] for _ in range(sentences)]
        return cls([], [], [], [], finished, [] if token_scores else None, attention)

    def append(
        self,
        tokens: Tensor,
        origins: Tensor,
        weights: Tensor | None,
        previous_slots: Tensor | None,
        scores: Tensor,
    ):
        self.tokens.append(tokens)
        self.origins.append(origins)
        kept = weights is not None and self.keeps_attention
        self.weights.append(weights.float() if kept else None)
        self.previous_slots.append(previous_slots)
        if self.scores is not None:
            self.scores.append(scores.reshape(-1).float())

    def read_back(
        self, src_mask: Tensor, nbest: int, distinct: bool = False
    ) -> list[list[Hypothesis]]:
        """Follow back-pointers from each kept hypothesis's EOS slot to its first token: the
        `nbest` best of each sentence, or with `distinct` its `nbest` best different outputs
        (diverse beam search's groups may each finish the same one)."""
        src_lengths = src_mask[:, 0].sum(-1).tolist()
        # Python lists: reading single elements of tensors costs microseconds each.
        tokens, origins = _to_lists(self.tokens), _to_lists(self.origins)
        previous = _to_lists(self.previous_slots)
        summed = None if self.scores is None else _to_lists(self.scores)
        self.weights = [None if w is None else w.cpu() for w in self.weights]

        def trace(sentence: int, score: float, last_step: int, slot: int) -> Hypothesis:
            path, attention, sums = [], [], []
            for s in range(last_step, -1, -1):
                path.append(tokens[s][slot])
                if summed is not None:
                    sums.append(summed[s][slot])
                row = origins[s][slot]
                weights = self.weights[s]
                if weights is not None:
                    attention.append(weights[row, ..., : src_lengths[sentence]])
                slots = previous[s]
                slot = row if slots is None else slots[row]
            kept = torch.stack(attention[::-1]) if attention else None
            steps = [b - a for a, b in itertools.pairwise([0.0, *sums[::-1]])] if sums else None
            return Hypothesis(path[::-1][:-1], score, kept, steps)

        def best(sentence: int, found: list[tuple[float, int, int]]) -> list[Hypothesis]:
            ordered = sorted(found, key=lambda h: -h[0])
            if not distinct:
                return [trace(sentence, *hyp) for hyp in ordered[:nbest]]
            kept: dict[tuple[int, ...], Hypothesis] = {}
            for hyp in ordered:
                if len(kept) == nbest:
                    break
                traced = trace(sentence, *hyp)
                kept.setdefault(tuple(traced.tokens), traced)
            return list(kept.values())

        return [best(sentence, found) for sentence, found in enumerate(self.finished)]


def _to_lists(tensors: list[Tensor | None]) -> list[list[int] | None]:
    """Each 1-d tensor (None stays None) as a list, read from the device in one copy."""
    present = [t for t in tensors if t is not None]
    if not present:
        return [None] * len(tensors)
    parts = iter(torch.cat(present).cpu().split([t.numel() for t in present]))
    return [None if t is None else next(parts).tolist() for t in tensors]
