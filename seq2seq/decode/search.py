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
back-pointers at the end. The loop's state is `beams.Beams`; lexical constraints widen
each step's candidates and share its slots among banks (`constraints`); diverse beam
search ranks them group by group (`diverse`).
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor

from seq2seq.config import Stopping
from seq2seq.decode.beams import Beams, first_beams, length_penalty
from seq2seq.decode.constraints import Constraints
from seq2seq.decode.diverse import BeamGroups
from seq2seq.decode.hypotheses import Hypothesis, Trail
from seq2seq.decode.prefix import Prefixes
from seq2seq.decode.sampling import Sampler
from seq2seq.models.base import DecoderState, Seq2Seq

# The `exact` rule's longest output: its bound waits for lp at the limit, so a limit of
# thousands (max_len_offset allows 10,000) kept 5 sentences searching for a minute; an
# output longer than this could only win where the model gives its pieces probability 1.
EXACT_LONGEST = 256


def output_limits(src_lengths: Tensor, ratio: float, offset: int) -> Tensor:
    """Per-sentence maximum number of target tokens (EOS included)."""
    return (src_lengths.float() * ratio).ceil().long() + offset


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
    constraints: Constraints | None = None,
    token_scores: bool = False,
    groups: BeamGroups | None = None,
) -> list[list[Hypothesis]]:
    """The `nbest` best hypotheses of each sentence, best first. `max_lengths` (B,) caps each
    output (EOS included, forced at the cap); `min_length` tokens come before EOS may. Without
    `attention`, no step forms or keeps weights it need not; with `token_scores`, each has its
    tokens' log-probabilities. `stopping`, `coverage_penalty` (beta of cp): the module's
    docstring. `no_repeat_ngram` n > 0: no output repeats an n-gram (`repeats`). A `sampler`
    draws the `beam` slots; `prefixes` start the outputs (`prefix`); `constraints` hold
    phrases (`constraints`); `groups` split the beam (`diverse`)."""
    max_lengths = max_lengths.clamp(max=EXACT_LONGEST) if stopping == "exact" else max_lengths
    beams = first_beams(
        model, src, src_mask, max_lengths, bos_id, (beam, nbest, alpha), prefixes, constraints
    )
    beams.track(src, no_repeat_ngram, coverage_penalty, groups, beam)
    trail, previous_slots = Trail.start(src.size(0), attention, token_scores), None
    for t in range(int(beams.max_lengths.max())):
        step = beams.decode(model, attention or beams.coverage is not None)
        log_probs = beams.allowed(step, t, t < min_length, eos_id, no_repeat_ngram)
        top_scores, origin, token = _choose(beams, log_probs, t, beam, sampler)
        at_eos = (token == eos_id).view_as(top_scores)
        cp = beams.cover(step, origin, coverage_penalty)
        _record_finished(trail.finished, beams, top_scores, at_eos, beam, t, alpha, cp)
        trail.append(token, origin, step.attention, previous_slots, top_scores)
        beams.scores, slots = beams.open_slots(top_scores, at_eos, beam)
        done, all_done, any_done = beams.done(t, alpha, stopping)
        if all_done:
            break
        beams, previous_slots = _next_beams(
            beams, step.state, origin, token, slots, done, any_done, beam
        )
    return trail.read_back(src_mask, nbest, distinct=groups is not None)


def _choose(
    beams: Beams, log_probs: Tensor, t: int, beam: int, sampler: Sampler | None
) -> tuple[Tensor, Tensor, Tensor]:
    """Each sentence's candidates for step `t`: its 2K best continuations (`_expand`; at
    most K end, one per row, so K that go on are among them), its one best in greedy
    search, the sampler's K draws, or each group's 2k best (`diverse`); with constraints,
    those that place them too."""
    if sampler is not None:
        if beams.constrained is not None:
            raise ValueError("lexical constraints need beam search, not samples")
        return sampler.expand(beams.scores, log_probs, beams.sentences, t, beam)
    if beams.groups is not None:
        return beams.groups.expand(beams.scores, log_probs, beam)
    best = _expand(beams.scores, log_probs, 2 * beam if beam > 1 else 1)
    return best if beams.constrained is None else beams.widen(log_probs, beam, *best)


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
    history, coverage, constrained = beams.history, beams.coverage, beams.constrained
    if history is not None:
        history = torch.cat([history[origin], token.unsqueeze(1)], dim=1)
    if coverage is not None:
        coverage = coverage[origin]
    if constrained is not None:
        constrained = constrained.moved(slots)
    beams = replace(
        beams,
        memory=memory,
        state=state,
        origins=origins,
        prev=token,
        history=history,
        coverage=coverage,
        constrained=constrained,
    )
    if not any_done:
        return beams, slots
    kept = (~done).nonzero().squeeze(1)
    rows = _rows_of(kept, beams.width)
    return beams.keep(kept, rows), rows if slots is None else slots[rows]


def _rows_of(sentences: Tensor, width: int) -> Tensor:
    """(A',) positions of sentences in the batch -> (A' * width,) their rows, in order."""
    return (sentences.unsqueeze(1) * width + torch.arange(width, device=sentences.device)).view(-1)
