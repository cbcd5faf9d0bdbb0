"""Repetition blocking: no output repeats an n-gram, and nothing changes where nothing
would repeat."""

import shutil

import pytest
import torch
from cli_helpers import run_cli
from test_search import ARCHS, every_output, sequence_log_prob, source, tiny

from seq2seq.decode.search import beams
from seq2seq.decode.search.beams import SearchSettings, length_penalty
from seq2seq.decode.search.loop import search
from seq2seq.decode.search.repeats import block_repeats_
from seq2seq.decode.search.strategy import BeamSearch
from seq2seq.decode.translate import Translator


def ngrams(tokens, n):
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def repeats(tokens, n):
    grams = ngrams(tokens, n)
    return len(grams) != len(set(grams))


def test_the_banned_tokens_are_those_that_would_complete_a_repeat():
    history = torch.tensor([[5, 6, 5, 7, 5], [1, 2, 3, 4, 1], [4, 4, 4, 4, 4]])
    banned = block_repeats_(torch.zeros(3, 9), history, 2).isinf()
    # Row 0 ends in 5, which 6 and 7 followed; row 1 in 1, followed by 2; row 2: 4 after 4.
    assert banned.nonzero().tolist() == [[0, 6], [0, 7], [1, 2], [2, 4]]
    assert block_repeats_(torch.zeros(3, 9), history, 1).isinf().sum(1).tolist() == [3, 4, 1]
    assert not block_repeats_(torch.zeros(3, 9), history, 6).isinf().any()  # too short


def long_outputs(arch):
    """A tiny model and sources with long output limits, where its outputs repeat."""
    model = tiny(arch, vocab=8)
    src, mask = source((6, 4, 2, 5))
    return model, src, mask, torch.tensor([20, 18, 16, 19])


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_no_output_repeats_an_ngram(arch, beam, n):
    model, src, mask, limits = long_outputs(arch)
    free = search(
        model,
        src,
        mask,
        limits,
        BeamSearch(beam),
        SearchSettings(nbest=beam, alpha=1.0, min_length=15),
    )
    assert any(repeats(h.tokens, n) for hyps in free for h in hyps)  # the test can fail
    found = search(
        model,
        src,
        mask,
        limits,
        BeamSearch(beam),
        SearchSettings(nbest=beam, alpha=1.0, min_length=15, no_repeat_ngram=n),
    )
    outputs = [h.tokens for hyps in found for h in hyps]
    assert outputs and not any(repeats(tokens, n) for tokens in outputs)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("beam", [1, 4])
def test_the_search_is_unchanged_when_nothing_would_repeat(arch, beam, monkeypatch):
    """The smallest n for which no step of the search bans a token: there the blocking
    search, which keeps and reorders histories, equals the free one."""
    model, src, mask, limits = long_outputs(arch)
    bans = []

    def spy(log_probs, history, n):
        before = log_probs.isinf().sum()
        block_repeats_(log_probs, history, n)
        bans.append((history.size(1) >= n, int(log_probs.isinf().sum() - before)))

    monkeypatch.setattr(beams, "block_repeats_", spy)

    def run(n):
        bans.clear()
        found = search(
            model,
            src,
            mask,
            limits,
            BeamSearch(beam),
            SearchSettings(nbest=beam, alpha=1.0, min_length=12, no_repeat_ngram=n),
        )
        return [[(h.tokens, h.score) for h in hyps] for hyps in found]

    n = next(n for n in range(2, 19) if run(n) and not any(count for _, count in bans))
    assert any(active for active, _ in bans)  # the blocking ran on complete n-grams
    assert run(n) == run(0)
    run(n - 1)
    assert any(count for _, count in bans)  # one size smaller bans something


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_is_unchanged_where_its_output_repeats_nothing(arch):
    model, src, mask, _ = long_outputs(arch)
    limits = torch.tensor([7, 6, 5, 7])
    free = search(model, src, mask, limits, BeamSearch(1), SearchSettings(min_length=4))
    n = next(n for n in range(1, 7) if not any(repeats(h[0].tokens, n) for h in free))
    blocked = search(
        model, src, mask, limits, BeamSearch(1), SearchSettings(min_length=4, no_repeat_ngram=n)
    )
    assert [h[0].tokens for h in blocked] == [h[0].tokens for h in free]
    if n > 1:  # one size smaller does repeat somewhere, and there blocking changes the output
        smaller = search(
            model,
            src,
            mask,
            limits,
            BeamSearch(1),
            SearchSettings(min_length=4, no_repeat_ngram=n - 1),
        )
        assert [h[0].tokens for h in smaller] != [h[0].tokens for h in free]


@pytest.mark.parametrize("arch", ARCHS)
def test_an_exhaustive_beam_finds_the_best_sequences_without_repeats(arch):
    vocab, limit, n = 5, 5, 1  # outputs of at most 4 tokens + EOS, no token twice
    model = tiny(arch, vocab)
    src, mask = source((5,))
    allowed = [seq for seq in every_output(vocab, limit) if not repeats(seq, n)]
    scored = sorted(
        ((sequence_log_prob(model, src, mask, seq) / float(length_penalty(
            torch.tensor(len(seq) + 1.0), 1.0)), seq) for seq in allowed),
        reverse=True,
    )  # fmt: skip
    beam = (vocab - 1) ** (limit - 1)
    found = search(
        model,
        src,
        mask,
        torch.tensor([limit]),
        BeamSearch(beam),
        SearchSettings(nbest=8, alpha=1.0, stopping="exact", no_repeat_ngram=n),
    )[0]
    assert [h.tokens for h in found] == [seq for _, seq in scored[:8]]


def test_the_command_line_and_the_python_api_block_repeats(trained, tmp_path):
    run = tmp_path / "run"  # a copy whose outputs must be long, and so repeat
    shutil.copytree(trained, run)
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("min_len: 1\n", "min_len: 12\n"))
    assert "min_len: 12" in config.read_text()
    lines = ["boka mimi toto tape podo boka mimi", "toto toto toto toto"]
    translator = Translator.load(run, device="cpu", beam=3)
    free = translator.hypotheses(lines, attention=False)
    assert any(repeats(hyps[0].tokens, 1) for hyps in free)
    blocked = translator.hypotheses(lines, no_repeat_ngram=1, attention=False)
    assert all(hyps and not repeats(hyps[0].tokens, 1) for hyps in blocked)
    source, output = tmp_path / "src.txt", tmp_path / "out.txt"
    source.write_text("".join(line + "\n" for line in lines))
    args = ["--run", run, "-i", source, "-o", output, "--beam", "3", "--device", "cpu"]
    assert run_cli("translate", *args, "--no-repeat-ngram", "1") == 0
    assert output.read_text().splitlines() == [hyps[0].text for hyps in blocked]
