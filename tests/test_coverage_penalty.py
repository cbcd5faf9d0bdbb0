"""The coverage penalty of beam search (`decode.coverage_penalty`): each finished score
adds beta * sum_j log(min(c_j, 1)) over the source positions j its steps attended
(c_j > 0), the step that chose EOS included, heads averaged."""

import math

import pytest
import torch
from test_search import BOS, EOS, every_output, source, tiny

from seq2seq.decode.search.beams import SearchSettings, length_penalty
from seq2seq.decode.search.loop import search
from seq2seq.decode.search.strategy import BeamSearch

ARCHS = ["rnn", "transformer"]  # the Transformer's `general` has 4 heads, the RNN's one


def sources(lengths):
    """`test_search.source`'s, each ending in EOS as a model reads it."""
    src, mask = source(lengths)
    for row, length in enumerate(lengths):
        src[row, length - 1] = EOS
    return src, mask


def forced(model, src, mask, tokens):
    """log P(tokens + EOS) and the attention (T + 1, S) of each step, heads averaged, by
    stepping the decoder along `tokens` the plain way."""
    with torch.no_grad():
        memory = model.encode(src, mask)
        state, log_p, rows = model.init_state(memory), 0.0, []
        for prev, y in zip([BOS, *tokens], [*tokens, EOS], strict=True):
            step = model.decode_step(memory, state, torch.tensor([prev]))
            log_p += float(step.log_probs[0, y])
            weights = step.attention[0]
            rows.append(weights.mean(0) if weights.dim() == 2 else weights)
            state = step.state
    return log_p, torch.stack(rows)


def penalty(attention, beta):
    """GNMT's cp over every step and source position, written the plain way."""
    coverage = attention.sum(0).tolist()
    return beta * sum(math.log(min(c, 1.0)) for c in coverage if c > 0)


@pytest.mark.parametrize("arch", ARCHS)
def test_an_exhaustive_beam_finds_the_best_sequences_by_the_penalised_score(arch):
    """Every output of at most 3 tokens over 6 ids, scored the plain way: the search with
    the `exact` rule returns the 10 best in order, at their scores, and they are not the
    unpenalised search's (the penalty changes the ranking)."""
    vocab, limit, alpha, beta = 6, 4, 1.0, 2.0
    model = tiny(arch, vocab)
    src, mask = sources((5,))
    scored = []
    for seq in every_output(vocab, limit):
        log_p, attention = forced(model, src, mask, seq)
        lp = float(length_penalty(len(seq) + 1.0, alpha))
        scored.append((log_p / lp + penalty(attention, beta), seq))
    scored.sort(key=lambda s: -s[0])
    beam = vocab ** (limit - 1)  # every open prefix kept, every EOS among the K best
    options = dict(nbest=10, alpha=alpha, stopping="exact")
    limits = torch.tensor([limit])
    penalised = SearchSettings(coverage_penalty=beta, **options)
    found = search(model, src, mask, limits, BeamSearch(beam), penalised)[0]
    assert [h.tokens for h in found] == [seq for _, seq in scored[:10]]
    assert [h.score for h in found] == pytest.approx([s for s, _ in scored[:10]], abs=1e-4)
    plain = search(model, src, mask, limits, BeamSearch(beam), SearchSettings(**options))[0]
    assert [h.tokens for h in plain] != [h.tokens for h in found]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("beam", [1, 4])
def test_every_hypothesis_scores_its_own_coverage_in_a_batch(arch, beam):
    """Sentences of several lengths (padding, leaving the batch at different steps): each
    n-best hypothesis's score is its log P / lp plus the cp of its own attention, the
    attention of stepping its sentence alone along it. (The cp is taken of the search's
    weights: a coverage of 1e-19 turns a float32 rounding of the padded batch into 1e-3
    of log, beyond the comparison's tolerance on some CPUs.)"""
    model = tiny(arch)
    src, mask = sources((7, 5, 3, 6))
    limits = torch.tensor([9, 8, 6, 9])
    found = search(
        model,
        src,
        mask,
        limits,
        BeamSearch(beam),
        SearchSettings(nbest=beam, alpha=1.0, coverage_penalty=0.8),
    )
    for row, length in enumerate(mask[:, 0].sum(-1).tolist()):
        one_src, one_mask = src[row : row + 1, :length], mask[row : row + 1, :, :length]
        for hyp in found[row]:
            log_p, attention = forced(model, one_src, one_mask, hyp.tokens)
            own = hyp.attention.mean(1) if hyp.attention.dim() == 3 else hyp.attention
            torch.testing.assert_close(own, attention, atol=1e-4, rtol=0)
            expected = log_p / (len(hyp.tokens) + 1) + penalty(own, 0.8)
            assert hyp.score == pytest.approx(expected, rel=1e-5, abs=1e-4)
