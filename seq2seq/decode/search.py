"""Beam search over the `Seq2Seq` contract, batched over sentences and beams at once.

The B sentences x K beams of a batch are B*K rows of one decoder batch (the first step,
from BOS alone, has one row per sentence), which share their sentence's encoded source
(`Memory.beam`). At each step every live row proposes its V continuations, and each
sentence takes the 2K best of its K*V by summed log-probability. Those of the K best
that end in EOS are finished, scored with the length penalty and, when asked, the
coverage penalty

    score = log P(y) / lp(y) + cp(y),  lp(y) = |y| ** alpha  (|y| counts the EOS),
    cp(y) = beta * sum over the source positions j with c_j > 0 of log(min(c_j, 1)),

where c_j is the attention that y's steps paid position j, heads averaged: GNMT's
penalty as CTranslate2 computes it, with the step that chose EOS and the source's EOS,
and without the positions never attended (padding; exact zeros of sparse attention). The
K best that do not end are the next step's K open hypotheses, so the beam stays K wide
(CTranslate2's and fairseq's search; with K = 1, greedy search exactly: it ends at its
first EOS). Log-probabilities only fall and cp <= 0, so an open hypothesis scores at
most log P / lp(longest allowed length), and a sentence is done by its stopping rule:
`exact` once no open hypothesis could beat the n best finished even there; `early` once
none would if it ended at the next step, log P / lp(|y| + 1); `beam` (the default, as in
CTranslate2 and fairseq) once K hypotheses have finished (for alpha > 0), or sooner
where `exact` would stop. With alpha = 0 the three are one rule; for alpha > 0 `early`
may miss a hypothesis that would only win by growing much longer, and `beam` one that
would finish after K others. Rows reorder their decoder state by index (`index_select`);
done sentences leave the batch at once; finished hypotheses are read back through
back-pointers at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from seq2seq.config import Stopping
from seq2seq.decode.hypotheses import Hypothesis, Trail
from seq2seq.decode.prefix import Prefixes, fitted_limits
from seq2seq.decode.repeats import block_repeats_
from seq2seq.decode.sampling import Sampler
from seq2seq.models.base import DecoderState, Memory, Seq2Seq, Step

# The `exact` rule's longest output: its bound waits for lp at the limit, so a limit of
# thousands (max_len_offset allows 10,000) kept 5 sentences searching for a minute; an
# output longer than this could only win where the model gives its pieces probability 1.
EXACT_LONGEST = 256


def output_limits(src_lengths: Tensor, ratio: float, offset: int) -> Tensor:
    """Per-sentence maximum number of target tokens (EOS included)."""
    return (src_lengths.float() * ratio).ceil().long() + offset


def length_penalty(lengths: Tensor | float, alpha: float) -> Tensor | float:
    return lengths**alpha


@torch.inference_mode()
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
    attention: bool = True,
    stopping: Stopping = "beam",
    no_repeat_ngram: int = 0,
    sampler: Sampler | None = None,
    prefixes: Prefixes | None = None,
    coverage_penalty: float = 0.0,
) -> list[list[Hypothesis]]:
    """The `nbest` best hypotheses of each sentence, best first.

    `max_lengths` (B,) caps each output (EOS included, and forced at the cap); `min_length`
    tokens come before EOS may (unless the cap comes first). Without `attention`, no step
    forms or keeps weights it need not. `stopping` (when a sentence is done) and
    `coverage_penalty` (beta of cp): see the module's docstring. `no_repeat_ngram` n > 0:
    no output repeats an n-gram (`repeats`). With a `sampler`, a sentence's `beam` slots
    are samples; with `prefixes`, each output starts with its sentence's (`prefix`)."""
    max_lengths = max_lengths.clamp(max=EXACT_LONGEST) if stopping == "exact" else max_lengths
    beams = _first_beams(model, src, src_mask, max_lengths, bos_id, beam, nbest, alpha, prefixes)
    beams.track(src, no_repeat_ngram, coverage_penalty)
    trail = Trail([], [], [], [])
    previous_slots: Tensor | None = None  # what `Trail.previous_slots` records
    finished: list[list[tuple[float, int, int]]] = [[] for _ in range(src.size(0))]
    for t in range(int(beams.max_lengths.max())):
        step = beams.decode(model, attention or beams.coverage is not None)
        log_probs = beams.allowed(step, t, t < min_length, eos_id, no_repeat_ngram)
        top_scores, origin, token = _choose(beams, log_probs, t, beam, sampler)
        at_eos = (token == eos_id).view_as(top_scores)
        cp = beams.cover(step, origin, coverage_penalty)
        _record_finished(finished, beams, top_scores, at_eos, beam, t, alpha, cp)
        trail.append(token, origin, step.attention if attention else None, previous_slots)
        beams.scores, slots = _open_slots(top_scores, at_eos, beam)
        done = beams.done(t, alpha, stopping)
        all_done, any_done = torch.stack([done.all(), done.any()]).tolist()  # one read
        if all_done:
            break
        beams, previous_slots = _next_beams(
            beams, step.state, origin, token, slots, done, any_done, beam
        )
    return trail.read_back(finished, src_mask, nbest)


@dataclass
class _Beams:
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

    @property
    def width(self) -> int:
        return self.scores.size(1)

    def decode(self, model: Seq2Seq, need_weights: bool) -> Step:
        """One decoder step for every row, once each row has the state of the row it extends."""
        state = self.state if self.origins is None else self.state.index_select(self.origins)
        return model.decode_step(self.memory, state, self.prev, need_weights)

    def allowed(
        self, step: Step, t: int, too_short: bool, eos_id: int, no_repeat_ngram: int
    ) -> Tensor:
        """(A*K, V) the step's log-probabilities, -inf where a row may not go: EOS before the
        minimum length, anything but EOS at the cap, a repeated n-gram, off its prefix (in
        place). A prefix's piece is read before repeats are blocked: it stays, repeat or not."""
        log_probs = _mask_eos_and_limits(step.log_probs.float(), self.at_cap(t), too_short, eos_id)
        prefixes = self.prefixes
        prefix = None if prefixes is None else prefixes.at(t, self.sentences, self.width, log_probs)
        if self.history is not None:
            block_repeats_(log_probs, self.history, no_repeat_ngram)
        if prefix is not None:
            prefix.keep_to_(log_probs)
        return log_probs

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

    def done(self, t: int, alpha: float, stopping: Stopping) -> Tensor:
        """(A,) whether each sentence is done after step `t`: no open slot can beat its
        n-th best finished, at the longest allowed length (`exact`; `beam`, which for
        alpha > 0 also stops once K hypotheses have finished) or if it ended at the next
        step (`early`), where it has t + 2 tokens with the EOS."""
        if stopping == "early":
            longest = length_penalty(t + 2.0, alpha)
        else:
            longest = self.longest.unsqueeze(1)
        bound = (self.scores / longest).amax(dim=1)
        beaten = bound <= self.best_finished[:, -1]  # also when no slot is open: -inf <= x
        if stopping == "beam" and alpha > 0:  # with alpha = 0 the bound is exact and cheap
            return beaten | (self.count >= self.width)
        return beaten

    def keep(self, index: Tensor, rows: Tensor) -> _Beams:
        """Only the sentences at `index` (A',), whose rows are `rows` (A'*K,)."""
        return _Beams(
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
        )


def _first_beams(
    model: Seq2Seq,
    src: Tensor,
    src_mask: Tensor,
    max_lengths: Tensor,
    bos_id: int,
    beam: int,
    nbest: int,
    alpha: float,
    prefixes: Prefixes | None,
) -> _Beams:
    """The beams before the first step: every sentence with one slot, at score 0, and its
    output limit raised where its prefix would not fit."""
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest must be between 1 and the beam size {beam}, got {nbest}")
    batch, device = src.size(0), src.device
    memory = model.encode(src, src_mask)
    max_lengths = max_lengths.to(device)
    if prefixes is not None:
        max_lengths = fitted_limits(max_lengths, prefixes.lengths)
    return _Beams(
        sentences=torch.arange(batch, device=device),
        max_lengths=max_lengths,
        longest=length_penalty(max_lengths.float(), alpha),
        best_finished=torch.full((batch, nbest), float("-inf"), device=device),
        count=torch.zeros(batch, dtype=torch.long, device=device),
        scores=torch.zeros(batch, 1, device=device),
        memory=memory,
        state=model.init_state(memory),
        origins=None,
        prev=torch.full((batch,), bos_id, dtype=torch.long, device=device),
        prefixes=prefixes,
    )


def _mask_eos_and_limits(log_probs: Tensor, at_cap: Tensor, too_short: bool, eos_id: int) -> Tensor:
    """(rows, V) log-probabilities with the rows `at_cap` only able to end, at EOS's own
    probability, and, when `too_short`, the others unable to end; changed in place (the
    step's own tensor: a copy per step would cost as much as the masking), and only in
    the rows at their cap (few, at few steps), not in a pass over every row."""
    eos = log_probs[:, eos_id].clone()
    if too_short:
        eos = eos.masked_fill(~at_cap, float("-inf"))
    if log_probs.is_cuda:  # a pass over every row costs a GPU less than waiting for nonzero()
        log_probs.masked_fill_(at_cap.unsqueeze(1), float("-inf"))
    else:
        log_probs.index_fill_(0, at_cap.nonzero().squeeze(1), float("-inf"))
    log_probs[:, eos_id] = eos
    return log_probs


def _choose(
    beams: _Beams, log_probs: Tensor, t: int, beam: int, sampler: Sampler | None
) -> tuple[Tensor, Tensor, Tensor]:
    """Each sentence's candidates for step `t`: its 2K best continuations (`_expand`; at
    most K end, one per row, so K that go on are among them), its one best in greedy
    search, or the sampler's K draws."""
    if sampler is None:
        return _expand(beams.scores, log_probs, 2 * beam if beam > 1 else 1)
    return sampler.expand(beams.scores, log_probs, beams.sentences, t, beam)


def _expand(scores: Tensor, log_probs: Tensor, beam: int) -> tuple[Tensor, Tensor, Tensor]:
    """Each sentence's `beam` best continuations of its W*V (W rows each): their summed
    log-probabilities (A, beam), best first, and for each candidate (A*beam,) the row it
    extends and its token. `log_probs` (A*W, V) becomes the candidates' scores, in place."""
    active, width = scores.shape
    vocab = log_probs.size(-1)
    candidates = log_probs.add_(scores.view(-1, 1)).view(active, width * vocab)
    top_scores, top_index = candidates.topk(min(beam, width * vocab), dim=1)
    if top_scores.size(1) < beam:  # fewer candidates than slots: the rest stay closed
        closed = beam - top_scores.size(1)
        top_scores = F.pad(top_scores, (0, closed), value=float("-inf"))
        top_index = F.pad(top_index, (0, closed))
    first_row = (torch.arange(active, device=scores.device) * width).unsqueeze(1)
    origin = (top_index // vocab + first_row).view(-1)
    token = (top_index % vocab).view(-1)
    return top_scores, origin, token


def _record_finished(
    finished: list[list[tuple[float, int, int]]],
    beams: _Beams,
    top_scores: Tensor,
    at_eos: Tensor,
    beam: int,
    t: int,
    alpha: float,
    penalties: Tensor | None,
) -> None:
    """Add the candidates (A, C) that finish at step `t`, those among the K = `beam` best
    that end in EOS (`at_eos`), to their sentence's `finished` as (score, step, slot),
    score = log P / lp(t + 1) + their coverage `penalties` (A*C,) if any, to `beams.count`
    and to `beams.best_finished`. An EOS below the K best does not finish, as in
    CTranslate2: K better candidates go on."""
    ends = at_eos & top_scores.isfinite()
    ends[:, beam:] = False
    ended = ends.nonzero()  # the step's one wait for the device, where none ends too
    if not len(ended):
        return
    lengths = torch.full_like(top_scores, t + 1.0)
    final = top_scores / length_penalty(lengths, alpha)
    if penalties is not None:
        final = final + penalties.view_as(final)
    final = torch.where(ends, final, -torch.inf)
    width = top_scores.size(1)
    sentence, a, k = beams.sentences[ended[:, 0]], ended[:, 0], ended[:, 1]
    read = torch.stack([sentence.double(), final[ends].double(), (a * width + k).double()])
    for sentence, score, slot in zip(*read.tolist(), strict=True):
        finished[int(sentence)].append((score, t, int(slot)))
    nbest = beams.best_finished.size(1)
    beams.best_finished = torch.cat([beams.best_finished, final], dim=1).topk(nbest, dim=1).values
    beams.count = beams.count + ends.sum(dim=1)


def _open_slots(top_scores: Tensor, at_eos: Tensor, beam: int) -> tuple[Tensor, Tensor | None]:
    """The next step's K = `beam` slots of each sentence, from its C candidates (A, C): the
    best that do not end in EOS, at their summed log-probabilities (A, K; -inf: closed),
    and the candidate each one is (A*K,), an index into the step's A*C; None where the
    candidates are the slots (samples, greedy search)."""
    scores = top_scores.masked_fill(at_eos, float("-inf"))
    active, width = scores.shape
    if width == beam:
        return scores, None
    scores, index = scores.topk(beam, dim=1)
    first = (torch.arange(active, device=scores.device) * width).unsqueeze(1)
    return scores, (index + first).view(-1)


def _next_beams(
    beams: _Beams,
    state: DecoderState,
    origin: Tensor,
    token: Tensor,
    slots: Tensor | None,
    done: Tensor,
    any_done: bool,
    beam: int,
) -> tuple[_Beams, Tensor | None]:
    """The beams for the next step (K = `beam` rows per sentence), whose rows go on from
    the step's candidates (`origin`, `token`) that `slots` names (None: all of them), and
    the slot of each row (`Trail.previous_slots`).

    The `done` sentences leave the batch at once: a row costs a step of the whole decoder,
    leaving costs a gather of their memory, and their rows' state moves with the reorder
    that beams do anyway (`_Beams.keep`).
    """
    if slots is not None:
        origin, token = origin[slots], token[slots]
    # With one beam every slot extends its own row: nothing to move.
    origins = origin if beam > 1 else None
    memory = beams.memory if beams.memory.beam == beam else beams.memory.widened(beam)
    history, coverage = beams.history, beams.coverage
    if history is not None:
        history = torch.cat([history[origin], token.unsqueeze(1)], dim=1)
    if coverage is not None:
        coverage = coverage[origin]
    beams = replace(
        beams,
        memory=memory,
        state=state,
        origins=origins,
        prev=token,
        history=history,
        coverage=coverage,
    )
    if not any_done:
        return beams, slots
    kept = (~done).nonzero().squeeze(1)
    rows = _rows_of(kept, beams.width)
    return beams.keep(kept, rows), rows if slots is None else slots[rows]


def _rows_of(sentences: Tensor, width: int) -> Tensor:
    """(A',) positions of sentences in the batch -> (A' * width,) their rows, in order."""
    return (sentences.unsqueeze(1) * width + torch.arange(width, device=sentences.device)).view(-1)
