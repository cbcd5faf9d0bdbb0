"""The search over the `Seq2Seq` contract, batched over sentences and beams at once: beam
search, written here, and the strategies that vary how it chooses (`strategy`).

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
back-pointers at the end. The loop's state is `beams.Beams`; each step's candidates and
open slots are the strategy's (`strategy.Strategy`): the best continuations of plain beam
search, samples, diverse beam search's groups, or lexical constraints' banks.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from seq2seq.data.tokenizer import BOS_ID, EOS_ID
from seq2seq.decode.search.beams import Beams, SearchSettings, length_penalty
from seq2seq.decode.search.hypotheses import Hypothesis, Trail
from seq2seq.decode.search.prefix import fitted_limits
from seq2seq.decode.search.strategy import Strategy
from seq2seq.models.base import DecoderState, Seq2Seq

# The `exact` rule's longest output: its bound waits for lp at the limit, so a limit of
# thousands (max_len_offset allows 10,000) kept 5 sentences searching for a minute; an
# output longer than this could only win where the model gives its pieces probability 1.
EXACT_LONGEST = 256


def output_limits(src_lengths: Tensor, ratio: float, offset: int) -> Tensor:
    """Per-sentence maximum number of target tokens (EOS included)."""
    return (src_lengths.float() * ratio).ceil().long() + offset


@torch.inference_mode()
def search(
    model: Seq2Seq,
    src: Tensor,
    src_mask: Tensor,
    max_lengths: Tensor,
    strategy: Strategy,
    settings: SearchSettings | None = None,
) -> list[list[Hypothesis]]:
    """The `settings.nbest` best hypotheses of each sentence, best first, as the `strategy`
    chooses them. `max_lengths` (B,) caps each output (EOS included, forced at the cap);
    `settings.min_length` tokens come before EOS may. Without `settings.attention`, no step
    forms or keeps weights it need not; with `token_scores`, each has its tokens'
    log-probabilities. `stopping`, `coverage_penalty` (beta of cp): the module's docstring."""
    s = settings or SearchSettings()
    max_lengths = max_lengths.clamp(max=EXACT_LONGEST) if s.stopping == "exact" else max_lengths
    beams = first_beams(model, src, src_mask, max_lengths, strategy, s)
    trail, previous_slots = Trail.start(src.size(0), s.attention, s.token_scores), None
    width = strategy.width
    for t in range(int(beams.max_lengths.max())):
        step = beams.decode(model, s.attention or beams.coverage is not None)
        log_probs = beams.allowed(step, t, t < s.min_length, s.no_repeat_ngram)
        top_scores, origin, token = strategy.candidates(beams, log_probs, t)
        at_eos = (token == EOS_ID).view_as(top_scores)
        cp = beams.cover(step, origin, s.coverage_penalty)
        _record_finished(trail.finished, beams, top_scores, at_eos, width, t, s.alpha, cp)
        trail.append(token, origin, step.attention, previous_slots, top_scores)
        beams.scores, slots = strategy.open_slots(beams, top_scores, at_eos)
        done, all_done, any_done = beams.done(t, s.alpha, s.stopping)
        if all_done:
            break
        beams, previous_slots = _next_beams(
            beams, step.state, origin, token, slots, done, any_done, width
        )
    return trail.read_back(src_mask, s.nbest, distinct=strategy.distinct)


def first_beams(
    model: Seq2Seq,
    src: Tensor,
    src_mask: Tensor,
    max_lengths: Tensor,
    strategy: Strategy,
    settings: SearchSettings,
) -> Beams:
    """The beams before the first step: every sentence with one slot, at score 0, and its
    output limit raised where its prefix and the pieces the `strategy` forces would not fit."""
    nbest, alpha, prefixes = settings.nbest, settings.alpha, settings.prefixes
    if not 1 <= nbest <= strategy.width:
        raise ValueError(f"nbest must be between 1 and the beam size {strategy.width}, got {nbest}")
    batch, device = src.size(0), src.device
    memory = model.encode(src, src_mask)
    max_lengths = max_lengths.to(device)
    forced = torch.zeros_like(max_lengths) if prefixes is None else prefixes.lengths
    if (pieces := strategy.forced_pieces()) is not None:
        forced = forced + pieces
    max_lengths = fitted_limits(max_lengths, forced)
    beams = Beams(
        sentences=torch.arange(batch, device=device),
        max_lengths=max_lengths,
        longest=length_penalty(max_lengths.float(), alpha),
        best_finished=torch.full((batch, nbest), float("-inf"), device=device),
        count=torch.zeros(batch, dtype=torch.long, device=device),
        scores=torch.zeros(batch, 1, device=device),
        memory=memory,
        state=model.init_state(memory),
        origins=None,
        prev=torch.full((batch,), BOS_ID, dtype=torch.long, device=device),
        prefixes=prefixes,
    )
    beams.track(src, settings.no_repeat_ngram, settings.coverage_penalty)
    strategy.start(beams)
    return beams


def _record_finished(
    finished: list[list[tuple[float, int, int]]],
    beams: Beams,
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


def _next_beams(
    beams: Beams,
    state: DecoderState,
    origin: Tensor,
    token: Tensor,
    slots: Tensor | None,
    done: Tensor,
    any_done: bool,
    beam: int,
) -> tuple[Beams, Tensor | None]:
    """The beams for the next step (K = `beam` rows per sentence), whose rows go on from
    the step's candidates (`origin`, `token`) that `slots` names (None: all of them), and
    the slot of each row (`Trail.previous_slots`).

    The `done` sentences leave the batch at once: a row costs a step of the whole decoder,
    leaving costs a gather of their memory, and their rows' state moves with the reorder
    that beams do anyway (`Beams.keep`).
    """
    if slots is not None:
        origin, token = origin[slots], token[slots]
    # With one beam every slot extends its own row: nothing to move.
    origins = origin if beam > 1 else None
    memory = beams.memory if beams.memory.beam == beam else beams.memory.widened(beam)
    history, coverage, records = beams.history, beams.coverage, beams.records
    if history is not None:
        history = torch.cat([history[origin], token.unsqueeze(1)], dim=1)
    if coverage is not None:
        coverage = coverage[origin]
    if records is not None:
        records = records.moved(slots)
    beams = replace(
        beams,
        memory=memory,
        state=state,
        origins=origins,
        prev=token,
        history=history,
        coverage=coverage,
        records=records,
    )
    if not any_done:
        return beams, slots
    kept = (~done).nonzero().squeeze(1)
    rows = _rows_of(kept, beams.width)
    return beams.keep(kept, rows), rows if slots is None else slots[rows]


def _rows_of(sentences: Tensor, width: int) -> Tensor:
    """(A',) positions of sentences in the batch -> (A' * width,) their rows, in order."""
    return (sentences.unsqueeze(1) * width + torch.arange(width, device=sentences.device)).view(-1)
