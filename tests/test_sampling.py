"""Sampling: draws follow the model's (tempered, truncated) distribution, exactly truncated,
reproducible by seed and independent of batching."""

import math

import pytest
import torch
from cli_helpers import run_cli
from test_search import ARCHS, BOS, EOS, source, tiny

from seq2seq.config import DecodeConfig
from seq2seq.data.padded_batches import make_batch
from seq2seq.decode.forced import forced_token_log_probs
from seq2seq.decode.search.beams import SearchSettings, length_penalty
from seq2seq.decode.search.loop import search
from seq2seq.decode.search.sampling import Sampler, truncated
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError

P = torch.tensor([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])


def kept(log_probs, temperature=1.0, top_k=0, top_p=1.0, epsilon=0.0):
    q = truncated(log_probs.unsqueeze(0), temperature, top_k, top_p, epsilon)
    return q[0].isfinite().nonzero()


def test_top_k_and_top_p_keep_exactly_the_tokens_they_name():
    log_p = P.log()
    assert kept(log_p, top_k=3).view(-1).tolist() == [0, 1, 2]
    assert kept(log_p, top_p=0.39).view(-1).tolist() == [0]  # the first reaches 0.39
    assert kept(log_p, top_p=0.41).view(-1).tolist() == [0, 1]
    assert kept(log_p, top_p=0.7).view(-1).tolist() == [0, 1, 2]
    assert kept(log_p, top_k=2, top_p=0.7).view(-1).tolist() == [0, 1]  # k first
    ties = torch.tensor([0.1, 0.3, 0.3, 0.3]).log()
    assert len(kept(ties, top_k=2)) == 2  # exactly k, ties or not
    assert kept(log_p, epsilon=0.12).view(-1).tolist() == [0, 1, 2]  # p >= 0.12
    assert kept(log_p, epsilon=0.5).view(-1).tolist() == [0]  # the most probable stays
    # After the temperature: at T = 2 q is sqrt(p) renormalised, its last two 0.107, 0.088.
    assert kept(log_p, temperature=2.0, epsilon=0.08).view(-1).tolist() == [0, 1, 2, 3, 4, 5]
    assert kept(log_p, temperature=2.0, epsilon=0.1).view(-1).tolist() == [0, 1, 2, 3, 4]
    tempered = truncated(log_p.unsqueeze(0), 2.0, 0, 1.0).softmax(-1)[0]
    assert tempered == pytest.approx(P.sqrt() / P.sqrt().sum(), abs=1e-6)


def first_token_distribution(model, src, mask, temperature, top_k, top_p, epsilon=0.0):
    """q of the first token, from the model's own step, as the module defines it."""
    with torch.no_grad():
        memory = model.encode(src, mask)
        step = model.decode_step(memory, model.init_state(memory), torch.tensor([BOS]))
    return truncated(step.log_probs.float(), temperature, top_k, top_p, epsilon).softmax(-1)[0]


def chi_square_p_value(counts, expected):
    """Pearson's test, bins of fewer than 5 expected draws merged into one."""
    small = expected < 5
    observed = torch.cat([counts[~small], counts[small].sum().view(1)])
    expected = torch.cat([expected[~small], expected[small].sum().view(1)])
    observed, expected = observed[expected > 0], expected[expected > 0]
    statistic = float(((observed - expected) ** 2 / expected).sum())
    df = len(expected) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2), torch.tensor(statistic / 2)))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(
    "options", [(1.0, 0, 1.0, 0.0), (0.7, 5, 1.0, 0.0), (1.5, 0, 0.8, 0.0), (1.0, 0, 1.0, 0.03)]
)
def test_draws_follow_the_models_distribution(arch, options):
    model, draws = tiny(arch), 4000
    src, mask = source((5,))
    q = first_token_distribution(model, src, mask, *options)
    temperature, top_k, top_p, epsilon = options
    sampler = Sampler.for_lines(list(range(draws)), 1, 2, 0, torch.device("cpu"),
                                temperature=temperature, top_k=top_k, top_p=top_p,
                                epsilon=epsilon)  # fmt: skip
    found = search(
        model, src.expand(draws, -1), mask.expand(draws, -1, -1), torch.full((draws,), 2), sampler
    )
    first = torch.tensor([h[0].tokens[0] if h[0].tokens else EOS for h in found])
    counts = torch.bincount(first, minlength=len(q)).float()
    assert not counts[q == 0].any()  # nothing outside the kept tokens, ever
    assert chi_square_p_value(counts, q * draws) > 1e-3
    assert (q > 0).sum() > 2  # a distribution, not one token


@pytest.mark.parametrize("arch", ARCHS)
def test_a_samples_score_is_the_models_log_probability_of_it(arch):
    """Each of N samples extends its own row: its score is what forced scoring gives."""
    model = tiny(arch)
    src, mask = source((6, 4, 2))
    lines = [[int(x) for x in src[i, : int(mask[i, 0].sum())]] for i in range(3)]
    batch = make_batch(lines, None, [0, 1, 2])
    sampler = Sampler.for_lines([0, 1, 2], 4, 12, 3, torch.device("cpu"))
    found = search(
        model,
        batch.src,
        batch.src_mask,
        torch.tensor([12, 10, 8]),
        sampler,
        SearchSettings(nbest=4, alpha=1.0),
    )
    samples = [(i, h) for i, hyps in enumerate(found) for h in hyps]
    assert len(samples) == 12 and len({tuple(h.tokens) for _, h in samples}) > 3
    pairs = make_batch([lines[i] for i, _ in samples], [h.tokens for _, h in samples],
                       list(range(12)))  # fmt: skip
    forced = forced_token_log_probs(model, pairs, [len(h.tokens) + 1 for _, h in samples]).sum(-1)
    for (_, h), total in zip(samples, forced.tolist(), strict=True):
        lp = length_penalty(len(h.tokens) + 1.0, 1.0)
        assert total / lp == pytest.approx(h.score, abs=1e-4) and math.isfinite(h.score)


LINES = ["boka mimi toto tape podo", "", "toto", "mimi tape podo boka", "tape"]


def test_the_same_seed_draws_the_same_samples_in_any_batch(trained):
    translator = Translator.load(trained, device="cpu")
    batched = translator.translate(LINES, nbest=3, sample=True, seed=4)
    assert translator.translate(LINES, nbest=3, sample=True, seed=4, batch_tokens=1) == batched
    assert translator.translate(LINES, nbest=3, sample=True, seed=5) != batched
    assert all(len(row) == 3 for row, line in zip(batched, LINES, strict=True) if line)
    # A line keeps its draws with other lines around it (its index is what seeds it).
    alone = translator.translate(["", "", "toto"], nbest=3, sample=True, seed=4)
    assert alone[2] == batched[2]


def test_a_search_asked_of_a_sampling_run_drops_the_runs_sampling_options(trained):
    translator = Translator.load(trained, device="cpu")
    searched = translator.translate(LINES, beam=2)
    translator.decode = DecodeConfig(sample=True, beam=1, temperature=0.5, top_k=3)  # samples
    assert translator.translate(LINES, sample=False, beam=2) == searched
    with pytest.raises(UserError, match="top_p shapes sampling; set sample true"):
        translator.translate(LINES, sample=False, top_p=0.5)  # given: not dropped


def test_bad_sampling_options_are_one_line(trained, tmp_path, capsys):
    source = tmp_path / "src.txt"
    source.write_text("toto\nmimi tape\n")
    args = ["translate", "--run", trained, "-i", source, "--device", "cpu"]
    assert run_cli(*args, "--sample", "--nbest", "2", "--seed", "3", "--top-k", "5") == 0
    rows = capsys.readouterr().out.splitlines()
    assert [row.split("\t")[0] for row in rows] == ["0", "0", "1", "1"]
    for bad, why in [
        (("--sample", "--beam", "2"), "beam 1"),
        (("--sample", "--top-p", "0"), "top_p"),
        (("--temperature", "0.5"), "set sample true"),
    ]:
        assert run_cli(*args, *bad) == 2
        err = capsys.readouterr().err.strip()
        assert why in err and len(err.splitlines()) == 1, err
