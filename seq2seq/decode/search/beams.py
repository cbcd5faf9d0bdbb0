"""The loop state of a search (`loop.search`): each sentence's open hypotheses, the rows of
the decoder batch that extend them, and what the search records of each row (its output
for repeat blocking, its attention for the coverage penalty, its progress with lexical
constraints); and the rules every strategy's candidates keep to (`Beams.allowed`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from seq2seq.config import Stopping
from seq2seq.data.tokenizer import EOS_ID
from seq2seq.decode.search.prefix import Prefixes
from seq2seq.decode.search.repeats import block_repeats_
from seq2seq.models.base import DecoderState, Memory, Seq2Seq, Step


@dataclass(frozen=True)
class SearchSettings:
    """What a search asks beyond its strategy: the rules every strategy's hypotheses keep
    to and how they are scored and read back (`loop.search`)."""

    nbest: int = 1  # hypotheses per sentence, best first
    alpha: float = 0.0  # the length penalty's exponent
    min_length: int = 0  # tokens before EOS may come
    stopping: Stopping = "beam"
    no_repeat_ngram: int = 0  # n > 0: no output repeats an n-gram (`repeats`)
    coverage_penalty: float = 0.0  # beta of the coverage penalty
    prefixes: Prefixes | None = None  # the outputs' starts (`prefix`)
    attention: bool = True  # whether hypotheses keep their attention
    token_scores: bool = False  # whether they keep each token's log-probability


class RowRecords(Protocol):
    """What a strategy keeps of each row itself (lexical constraints' progress): it moves
    with the rows, and may forbid a row some tokens."""

    def restrict_(self, log_probs: Tensor, row_sentences: Tensor) -> None:
        """-inf in `log_probs` (rows, V) where a row may not go, in place."""

    def moved(self, slots: Tensor) -> RowRecords:
        """The records of the next step's rows, which go on from the candidates `slots`."""

    def keep(self, rows: Tensor) -> RowRecords:
        """Only the records of `rows`."""


def length_penalty(lengths: Tensor | float, alpha: float) -> Tensor | float:
    return lengths**alpha


@dataclass
class Beams:
    """The search's loop state: per sentence still in the batch (A of them, in the order of
    the batch), and per row of the decoder batch (K rows, or slots, per sentence).

    The decoder state moves to the rows extending it (`origins`) only in `decode`, so that
    dropping done sentences and reordering cost one gather.
    """

    sentences: Tensor  # (A,) its index in the input
    max_lengths: Tensor  # (A,) its output cap, EOS included
    longest: Tensor  # (A,) lp(its cap): the denominator of the bound in `done`
    best_finished: Tensor  # (A, nbest) the n best finished scores so far, best first
    count: Tensor  # (A,) how many hypotheses have finished so far
    # (A, K) summed log-probabilities of the open slots (K = 1 before the first step);
    # -inf: closed or unused
    scores: Tensor
    memory: Memory  # (A sources, read by K rows each) the encoded source
    state: DecoderState  # the last step's decoder state, by the rows it was computed for
    origins: Tensor | None  # (A*K,) the row of `state` each row extends; None: its own
    prev: Tensor  # (A*K,) the token each row feeds the decoder next
    history: Tensor | None = None  # (A*K, t) each row's output so far, when blocking repeats
    # (A*K, S) the attention each row's hypothesis has paid each source position so far,
    # when penalising coverage
    coverage: Tensor | None = None
    prefixes: Prefixes | None = None  # by sentence (`sentences`), when outputs have prefixes
    records: RowRecords | None = None  # the strategy's own records of each row, if any

    @property
    def width(self) -> int:
        return self.scores.size(1)

    def decode(self, model: Seq2Seq, need_weights: bool) -> Step:
        """One decoder step for every row, once each row has the state of the row it extends."""
        state = self.state if self.origins is None else self.state.index_select(self.origins)
        return model.decode_step(self.memory, state, self.prev, need_weights)

    def allowed(self, step: Step, t: int, too_short: bool, no_repeat_ngram: int) -> Tensor:
        """(A*K, V) the step's log-probabilities, -inf where a row may not go: EOS before the
        minimum length, anything but EOS at the cap, a repeated n-gram, off its prefix, EOS
        before its phrases (in place). A prefix's piece is read before repeats are blocked:
        it stays, repeat or not."""
        log_probs = _mask_eos_and_limits(step.log_probs.float(), self.at_cap(t), too_short)
        prefixes = self.prefixes
        prefix = None if prefixes is None else prefixes.at(t, self.sentences, self.width, log_probs)
        if self.history is not None:
            block_repeats_(log_probs, self.history, no_repeat_ngram)
        if prefix is not None:
            prefix.keep_to_(log_probs)
        if self.records is not None:
            self.records.restrict_(log_probs, self.row_sentences())
        return log_probs

    def row_sentences(self) -> Tensor:
        """(A*K,) the input sentence of each row."""
        return self.sentences.repeat_interleave(self.width)

    def track(self, src: Tensor, no_repeat_ngram: int, coverage_penalty: float) -> None:
        """Start the records of each row that the search needs: its output so far, to
        block repeats, and the attention it has paid, for the coverage penalty."""
        self.history = src.new_empty(src.size(0), 0) if no_repeat_ngram else None
        self.coverage = src.new_zeros(src.shape, dtype=torch.float) if coverage_penalty else None

    def cover(self, step: Step, origin: Tensor, beta: float) -> Tensor | None:
        """Add the step's attention to each row's `coverage`, and return the coverage
        penalty (A*C,) of each of the step's candidates (`origin`: the row each extends)
        were it to end here. None without a coverage penalty."""
        if self.coverage is None:
            return None
        weights = step.attention.float()
        self.coverage = self.coverage + (weights.mean(1) if weights.dim() == 3 else weights)
        clipped = self.coverage.clamp(max=1.0).log()
        return beta * torch.where(self.coverage > 0, clipped, 0.0).sum(-1)[origin]

    def at_cap(self, t: int) -> Tensor:
        """(A*K,) whether each row's output reaches its cap with the token of step `t`."""
        return (self.max_lengths <= t + 1).repeat_interleave(self.width)

    def done(self, t: int, alpha: float, stopping: Stopping) -> tuple[Tensor, bool, bool]:
        """(A,) whether each sentence is done after step `t`: no open slot can beat its
        n-th best finished, at the longest allowed length (`exact`; `beam`, which for
        alpha > 0 also stops once K hypotheses have finished) or if it ended at the next
        step (`early`), where it has t + 2 tokens with the EOS; and whether all are, and
        any is (read from the device at once)."""
        if stopping == "early":
            longest = length_penalty(t + 2.0, alpha)
        else:
            longest = self.longest.unsqueeze(1)
        bound = (self.scores / longest).amax(dim=1)
        done = bound <= self.best_finished[:, -1]  # also when no slot is open: -inf <= x
        if stopping == "beam" and alpha > 0:  # with alpha = 0 the bound is exact and cheap
            done = done | (self.count >= self.width)
        all_done, any_done = torch.stack([done.all(), done.any()]).tolist()
        return done, all_done, any_done

    def keep(self, index: Tensor, rows: Tensor) -> Beams:
        """Only the sentences at `index` (A',), whose rows are `rows` (A'*K,)."""
        return Beams(
            self.sentences[index],
            self.max_lengths[index],
            self.longest[index],
            self.best_finished[index],
            self.count[index],
            self.scores[index],
            self.memory.index_select(index),
            self.state,
            rows if self.origins is None else self.origins[rows],
            self.prev[rows],
            None if self.history is None else self.history[rows],
            None if self.coverage is None else self.coverage[rows],
            self.prefixes,
            None if self.records is None else self.records.keep(rows),
        )


def _mask_eos_and_limits(log_probs: Tensor, at_cap: Tensor, too_short: bool) -> Tensor:
    """(rows, V) log-probabilities with the rows `at_cap` only able to end, at EOS's own
    probability, and, when `too_short`, the others unable to end; changed in place (the
    step's own tensor: a copy per step would cost as much as the masking), and only in
    the rows at their cap (few, at few steps), not in a pass over every row."""
    eos = log_probs[:, EOS_ID].clone()
    if too_short:
        eos = eos.masked_fill(~at_cap, float("-inf"))
    if log_probs.is_cuda:  # a pass over every row costs a GPU less than waiting for nonzero()
        log_probs.masked_fill_(at_cap.unsqueeze(1), float("-inf"))
    else:
        log_probs.index_fill_(0, at_cap.nonzero().squeeze(1), float("-inf"))
    log_probs[:, EOS_ID] = eos
    return log_probs
