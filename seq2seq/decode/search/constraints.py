"""Lexical constraints: phrases that each output of a sentence must contain (terminology,
names, a word the translation must use), in any order, found by dynamic beam allocation
(Post and Vilar, 2018).

A phrase is target text; its pieces are the target SentencePiece model's, encoded alone
(so "Hund" is the piece sequence of " Hund": it matches a word, not the inside of one). A
hypothesis meets a phrase when its pieces appear in it in a row; its progress is the
phrases met and how far into each the output has come (a phrase interrupted starts over;
one that overlaps itself, "a a b" after "a a a b", is missed). At each step
the search's candidates are the usual best continuations plus, for every open
hypothesis, the next piece of each phrase it has not met and its own best piece; then
the K open slots are shared among banks, one bank per count of constraint pieces met
(0 .. all), each taking its best candidates up to K // banks (at least one), and the
slots left go to the best candidates of any bank. So hypotheses that placed more of the
constraints keep a place in the beam although they score lower for now. A hypothesis may
end (EOS) only once it has met every phrase; one that reaches the output limit without
them has no way on, and a sentence none of whose hypotheses met them ends without a
translation (the caller translates it again without constraints, and says so).

A phrase with characters the target vocabulary lacks is placed with its unknown pieces,
and the output text shows it as given (`verbatim_phrases`), never SentencePiece's mark
for an unknown piece.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from seq2seq.config import DecodeConfig
from seq2seq.data.tokenizer import EOS_ID
from seq2seq.decode.search.phrases import NONE, Constraints
from seq2seq.decode.search.strategy import BatchFacts, BeamSearch, Candidates

if TYPE_CHECKING:
    from seq2seq.decode.search.beams import Beams


@dataclass(frozen=True)
class Progress:
    """How far each hypothesis (a row, or a candidate) has come with each phrase of its
    sentence: met, or how many of its first pieces the output ends with (every phrase is
    followed at once, so "red" may start "red car" and "red ball" alike)."""

    met: Tensor  # (R, C) whether it contains phrase c
    position: Tensor  # (R, C) the pieces of phrase c its output ends with (0 once met)

    @classmethod
    def start(cls, rows: int, phrases: int, device: torch.device) -> Progress:
        met = torch.zeros(rows, phrases, dtype=torch.bool, device=device)
        return cls(met, torch.zeros(rows, phrases, dtype=torch.long, device=device))

    def select(self, rows: Tensor) -> Progress:
        return Progress(self.met[rows], self.position[rows])

    def pieces_met(self, lengths: Tensor) -> Tensor:
        """(R,) constraint pieces placed: those of the phrases met, and of the one furthest
        under way. `lengths` (R, C): the phrases' lengths of each row's sentence."""
        return (self.met * lengths).sum(1) + self.position.amax(1)

    def complete(self, lengths: Tensor) -> Tensor:
        """(R,) whether every phrase is met."""
        return (self.met | (lengths == 0)).all(1)

    def next_pieces(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """(R, C) the piece that takes each phrase not met one further (its first, where
        none of it is under way); NONE for a phrase met or absent."""
        position = self.position.clamp(max=tokens.size(2) - 1).unsqueeze(2)
        going = tokens.gather(2, position).squeeze(2)
        return torch.where(~self.met & (lengths > 0), going, NONE)

    def after(self, token: Tensor, tokens: Tensor, lengths: Tensor) -> Progress:
        """The progress once each row has taken `token` (R,); `tokens` (R, C, L) and
        `lengths` (R, C): its sentence's phrases. A phrase whose next piece it is goes one
        further (and is met at its end); any other starts over, at its first piece if the
        token is that."""
        token = token.unsqueeze(1)
        goes_on = self.next_pieces(tokens, lengths) == token
        starts = ~self.met & (lengths > 0) & (tokens[:, :, 0] == token)
        position = torch.where(goes_on, self.position + 1, starts.long())
        met = self.met | (goes_on & (position == lengths))
        return Progress(met, position.masked_fill(met, 0))


@dataclass(frozen=True)
class ConstrainedBeams:
    """The constraints of a search's sentences and the progress of its rows."""

    constraints: Constraints  # by input sentence
    progress: Progress  # by row of the decoder batch
    candidates: Progress | None = None  # by candidate of the last step, once `widen`ed
    banks: Tensor | None = None  # (A, N) the pieces each of those candidates has placed
    totals: Tensor | None = None  # (A, N) those of its sentence's phrases

    @classmethod
    def start(cls, constraints: Constraints) -> ConstrainedBeams:
        rows, phrases = constraints.lengths.shape
        return cls(constraints, Progress.start(rows, phrases, constraints.lengths.device))

    def restrict_(self, log_probs: Tensor, row_sentences: Tensor) -> None:
        """No row ends (EOS) before it has met every phrase of its sentence."""
        lengths = self.constraints.lengths[row_sentences]
        log_probs[:, EOS_ID].masked_fill_(~self.progress.complete(lengths), float("-inf"))

    def widen(
        self,
        cumulative: Tensor,
        beam: int,
        top_scores: Tensor,
        origin: Tensor,
        token: Tensor,
        row_sentences: Tensor,
    ) -> tuple[ConstrainedBeams, Tensor, Tensor, Tensor]:
        """The step's candidates (A, N) with each open row's next piece of every phrase and
        its own best piece added to the usual ones (`top_scores`, with `origin` and `token`
        (A*C,)); `cumulative` (A*W, V): every continuation's summed log-probability. In
        the order in which they take the K = `beam` slots (`_bank_order`), so that the EOS
        of a hypothesis that met every phrase finishes where it wins a slot of its bank
        (the search finishes the EOS among the first K); and this with each candidate's
        progress (`candidates`)."""
        active, rows = top_scores.size(0), cumulative.size(0)
        tokens = self.constraints.tokens[row_sentences]
        lengths = self.constraints.lengths[row_sentences]
        extra = self.progress.next_pieces(tokens, lengths)
        extra = torch.cat([extra, cumulative.argmax(1, keepdim=True)], dim=1)
        extra_scores = cumulative.gather(1, extra.clamp(min=0)).masked_fill(extra < 0, -torch.inf)
        extra_origin = torch.arange(rows, device=extra.device).unsqueeze(1).expand_as(extra)
        scores = torch.cat([top_scores, extra_scores.reshape(active, -1)], dim=1)
        origin = torch.cat([origin.view(active, -1), extra_origin.reshape(active, -1)], dim=1)
        token = torch.cat([token.view(active, -1), extra.clamp(min=0).reshape(active, -1)], dim=1)
        keys = origin * cumulative.size(1) + token
        unique = -1 - torch.arange(keys.size(1), device=keys.device)  # for closed candidates
        scores = _without_repeats(scores, torch.where(scores.isfinite(), keys, unique))
        scores, order = scores.sort(dim=1, descending=True, stable=True)
        origin, token = origin.gather(1, order).view(-1), token.gather(1, order).view(-1)
        after = self.progress.select(origin).after(token, tokens[origin], lengths[origin])
        bank = after.pieces_met(lengths[origin]).view_as(scores)
        totals = self.constraints.totals[row_sentences[origin]].view_as(scores)
        order = _bank_order(scores.isfinite(), bank, totals, self.constraints.most, beam)
        flat = (order + torch.arange(active, device=order.device)[:, None] * order.size(1)).view(-1)
        scores, origin, token = scores.gather(1, order), origin[flat], token[flat]
        banks, totals = bank.gather(1, order), totals.gather(1, order)
        chosen = replace(self, candidates=after.select(flat), banks=banks, totals=totals)
        return chosen, scores, origin, token

    def allocate(self, top_scores: Tensor, at_eos: Tensor, beam: int) -> tuple[Tensor, Tensor]:
        """The next step's K = `beam` slots of each sentence from the candidates `widen`
        gave (A, N), by banks of constraint pieces met (see the module): their scores (A,
        K; -inf: closed) and the candidate each is (A*K,), an index into the step's A*N."""
        active, width = top_scores.shape
        open_ = top_scores.isfinite() & ~at_eos
        order = _bank_order(open_, self.banks, self.totals, self.constraints.most, beam)
        order = order[:, :beam]
        scores = top_scores.gather(1, order).masked_fill(~open_.gather(1, order), -torch.inf)
        first = (torch.arange(active, device=order.device) * width).unsqueeze(1)
        return scores, (order + first).view(-1)

    def moved(self, slots: Tensor) -> ConstrainedBeams:
        """The progress of the next step's rows: that of the candidates `slots` names."""
        return ConstrainedBeams(self.constraints, self.candidates.select(slots))

    def keep(self, rows: Tensor) -> ConstrainedBeams:
        return ConstrainedBeams(self.constraints, self.progress.select(rows))


@dataclass(frozen=True)
class ConstrainedBeamSearch(BeamSearch):
    """Beam search whose outputs hold each sentence's phrases (see the module): the rows'
    progress rides with the beams (`Beams.records`), whose rules keep a row from
    ending before it has met them."""

    constraints: Constraints

    @classmethod
    def applies(cls, decode: DecodeConfig, batch: BatchFacts) -> bool:
        return batch.constraints is not None

    @classmethod
    def of(cls, decode: DecodeConfig, batch: BatchFacts) -> ConstrainedBeamSearch:
        return cls(decode.beam, batch.constraints)

    def forced_pieces(self) -> Tensor:
        return self.constraints.totals

    def start(self, beams: Beams) -> None:
        beams.records = ConstrainedBeams.start(self.constraints)

    def candidates(self, beams: Beams, log_probs: Tensor, t: int) -> Candidates:
        """Beam search's candidates and those that place phrases (`ConstrainedBeams.widen`)."""
        best = super().candidates(beams, log_probs, t)
        beams.records, *widened = beams.records.widen(
            log_probs, self.beam, *best, beams.row_sentences()
        )
        return tuple(widened)

    def open_slots(self, beams: Beams, top_scores: Tensor, at_eos: Tensor) -> tuple[Tensor, Tensor]:
        return beams.records.allocate(top_scores, at_eos, self.beam)


def _bank_order(eligible: Tensor, bank: Tensor, totals: Tensor, most: int, beam: int) -> Tensor:
    """(A, N) each sentence's candidates (A, N, best first) in the order in which they take
    its K = `beam` slots: of those `eligible`, the best K // banks (at least one) of each
    bank, the bank of most pieces met first, then the others best first, then those not
    eligible. `bank` (A, N): the constraint pieces each has met; `totals` (A, N): its
    sentence's, whose banks are 0 .. total; `most`: the largest total."""
    members = F.one_hot(bank, most + 1) * eligible.unsqueeze(2)
    rank = (members.cumsum(1) - members).gather(2, bank.unsqueeze(2)).squeeze(2)
    banked = eligible & (rank < (beam // (totals + 1)).clamp(min=1))
    key = torch.where(banked, most - bank, most + 1).masked_fill(~eligible, most + 2)
    return key.argsort(dim=1, stable=True)


def _without_repeats(scores: Tensor, keys: Tensor) -> Tensor:
    """`scores` (A, N) with -inf for each candidate whose key (row x V + token) an earlier
    one of its sentence has: a continuation proposed twice takes one slot."""
    sorted_keys, order = keys.sort(dim=1, stable=True)
    repeated = torch.zeros_like(keys, dtype=torch.bool)
    repeated[:, 1:] = sorted_keys[:, 1:] == sorted_keys[:, :-1]
    again = torch.zeros_like(repeated).scatter_(1, order, repeated)
    return scores.masked_fill(again, -torch.inf)
