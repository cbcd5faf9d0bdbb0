"""Forced scoring: the log-probability of a given translation, as the search computes it."""

import pytest
import torch
from cli_helpers import run_cli
from test_search import ARCHS, BOS, EOS, tiny

from seq2seq.data.padded_batches import make_batch
from seq2seq.decode.forced import forced_token_log_probs
from seq2seq.decode.search.beams import SearchSettings, length_penalty
from seq2seq.decode.search.loop import search
from seq2seq.decode.search.strategy import BeamSearch
from seq2seq.decode.translate import Translator


def stepwise_log_prob(model, src, mask, tokens):
    """Sum of log p(y_t | y_<t, x) over the tokens and EOS, one decoder step at a time."""
    with torch.no_grad():
        memory = model.encode(src, mask)
        state, prev, total = model.init_state(memory), torch.tensor([BOS]), 0.0
        for token in [*tokens, EOS]:
            step = model.decode_step(memory, state, prev)
            total += float(step.log_probs[0, token])
            state, prev = step.state, torch.tensor([token])
    return total


def pairs_batch(sources, references):
    return make_batch(sources, references, list(range(len(sources))))


@pytest.mark.parametrize("arch", ARCHS)
def test_a_batch_scores_the_sum_of_each_pairs_step_log_probabilities(arch):
    model = tiny(arch)
    sources = [[5, 9, 12, 7, 22], [4, 6, 8], [11, 13]]
    references = [[5, 9, 12, 7], [], [20, 20, 4, 8, 11, 6, 9]]  # padded unlike the sources
    batch = pairs_batch(sources, references)
    found = forced_token_log_probs(model, batch, [len(r) + 1 for r in references]).sum(-1).tolist()
    for i, tokens in enumerate(references):
        one = pairs_batch(sources[i : i + 1], [tokens])
        expected = stepwise_log_prob(model, one.src, one.src_mask, tokens)
        assert found[i] == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_the_beams_hypotheses_score_what_the_search_said(arch, alpha):
    model = tiny(arch)
    sources = [[5, 9, 12, 7, 22], [4, 6, 8], [11, 13]]
    batch = pairs_batch(sources, None)
    found = search(
        model,
        batch.src,
        batch.src_mask,
        torch.tensor([9, 7, 5]),
        BeamSearch(4),
        SearchSettings(nbest=3, alpha=alpha),
    )
    hyps = [(i, h) for i, hyps in enumerate(found) for h in hyps]
    pairs = pairs_batch([sources[i] for i, _ in hyps], [h.tokens for _, h in hyps])
    forced = forced_token_log_probs(model, pairs, [len(h.tokens) + 1 for _, h in hyps]).sum(-1)
    for (_, h), total in zip(hyps, forced.tolist(), strict=True):
        lp = float(length_penalty(torch.tensor(len(h.tokens) + 1.0), alpha))
        assert total / lp == pytest.approx(h.score, abs=1e-4)


def test_the_command_line_and_the_python_api_score_translations(trained, toy, tmp_path):
    translator = Translator.load(trained, device="cpu", beam=3)
    sources = (toy / "data/test.src").read_text().splitlines()
    best = [hyps[0] for hyps in translator.hypotheses(sources, attention=False)]
    references = [h.text for h in best]
    scores = translator.score(sources, [*references[:-1], ""], batch_tokens=40)
    # Text back to pieces may split otherwise than the search did; those pairs score alike.
    same = [
        (s, h)
        for s, h, ids in zip(scores, best, translator.tokenizer.encode_tgt(references), strict=True)
        if ids == h.tokens
    ][:-1]
    assert same  # a barely trained model babbles, and some babble splits otherwise
    for s, h in same:
        assert s.normalised == pytest.approx(h.score, abs=1e-4)
        assert s.tokens == len(h.tokens) + 1 and s.per_token * s.tokens == pytest.approx(s.log_prob)
    assert scores[-1].tokens == 1  # a blank translation is scored as EOS alone
    # Batches in length order, scores back in input order: one batch scores the same.
    whole = translator.score(sources, [*references[:-1], ""], batch_tokens=100_000)
    assert [s.log_prob for s in whole] == pytest.approx([s.log_prob for s in scores], abs=1e-4)
    src, ref, out = tmp_path / "src.txt", tmp_path / "ref.txt", tmp_path / "scores.tsv"
    src.write_text("\n".join(sources) + "\n")
    ref.write_text("\n".join([*references[:-1], ""]) + "\n")
    args = ["score", "--run", trained, "--src", src, "--ref", ref, "--device", "cpu"]
    assert run_cli(*args, "-o", out) == 0
    rows = [[float(x) for x in line.split("\t")] for line in out.read_text().splitlines()]
    assert len(rows) == len(sources)
    for row, s in zip(rows, scores, strict=True):
        assert row == pytest.approx([s.log_prob, s.per_token, s.normalised], abs=1e-4)
    ref.write_text("one line\n")
    assert run_cli(*args) == 2
