"""Diverse beam search (`decode.beam_groups`, `decode.group_diversity`): groups of a beam,
each penalised for the tokens the earlier groups chose at the same step, whose scores stay
log-probabilities."""

import subprocess
import sys

import pytest
import torch
from cli_helpers import run_cli
from conftest import SCRIPTS
from test_coverage_penalty import forced
from test_search import source, tiny

from seq2seq.config import DecodeConfig
from seq2seq.decode.search import loop
from seq2seq.decode.search.beams import SearchSettings
from seq2seq.decode.search.diverse import DiverseBeamSearch
from seq2seq.decode.search.strategy import BeamSearch
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError

ARCHS = ["rnn", "transformer"]
LIMITS = torch.tensor([12, 10, 8])


def search(arch, beam, nbest, groups=None):
    """`groups`: (G, lambda) of diverse beam search; None: plain beam search."""
    model = tiny(arch)
    src, mask = source()
    strategy = BeamSearch(beam) if groups is None else DiverseBeamSearch(beam, *groups)
    return loop.search(model, src, mask, LIMITS, strategy, SearchSettings(nbest=nbest, alpha=1.0))


def found(sentences):
    return [[(h.tokens, round(h.score, 5)) for h in hypotheses] for hypotheses in sentences]


@pytest.mark.parametrize("arch", ARCHS)
def test_one_group_is_plain_beam_search(arch):
    """With one group nothing is penalised: the same search as without groups."""
    assert found(search(arch, 4, 4, (1, 5.0))) == found(search(arch, 4, 4))


@pytest.mark.parametrize("arch", ARCHS)
def test_without_diversity_each_group_is_a_beam_of_its_own(arch):
    """lambda = 0: two groups of 2 are two beams of 2, each finding what a beam of 2 finds;
    the n-best list holds each output once."""
    grouped = found(search(arch, 4, 4, (2, 0.0)))
    assert [hypotheses[:2] for hypotheses in grouped] == found(search(arch, 2, 2))
    assert all(len({tuple(tokens) for tokens, _ in hyps}) == len(hyps) for hyps in grouped)


@pytest.mark.parametrize("arch", ARCHS)
def test_scores_stay_log_probabilities(arch):
    """Each hypothesis's score is its log P / lp, as stepping its sentence alone gives it:
    the penalty ranks candidates and is never added to a score."""
    model, (src, mask) = tiny(arch), source()
    sentences = search(arch, 4, 4, (4, 3.0))
    for row, length in enumerate(mask[:, 0].sum(-1).tolist()):
        one_src, one_mask = src[row : row + 1, :length], mask[row : row + 1, :, :length]
        for hyp in sentences[row]:
            log_p = forced(model, one_src, one_mask, hyp.tokens)[0]
            assert hyp.score == pytest.approx(log_p / (len(hyp.tokens) + 1), abs=1e-4)
    assert found(sentences) != found(search(arch, 4, 4))  # the groups found other outputs


def test_each_group_ranks_by_its_penalty_and_keeps_the_summed_log_probabilities():
    """Two sentences, 3 groups of one row, every row preferring tokens 0, 1, 2, 3 in that
    order, lambda = 10: group 1 takes 0 (then 1), group 2 avoids 0 and takes 1 (then 2),
    group 3 avoids both and takes 2 (then 3). The candidates: each group's best, then each
    group's next, at their summed log-probabilities."""
    log_p = torch.tensor([-1.0, -1.1, -1.2, -3.0, -4.0])
    scores = torch.tensor([[0.0, -0.1, -0.2]] * 2)
    top, origin, token = DiverseBeamSearch(3, 3, 10.0).expand(scores, log_p.repeat(6, 1))
    assert token.view(2, 6).tolist() == [[0, 1, 2, 1, 2, 3]] * 2
    assert origin.view(2, 6).tolist() == [[0, 1, 2, 0, 1, 2], [3, 4, 5, 3, 4, 5]]
    expected = scores.repeat(1, 2) + log_p[token.view(2, 6)]
    torch.testing.assert_close(top, expected)  # log-probabilities, not penalised


def test_a_group_whose_best_candidate_ends_opens_its_next():
    """Open slots per group, in its penalised rank: an EOS among a group's k best finishes and
    its next candidate takes the slot; the other group is untouched."""
    groups = DiverseBeamSearch(4, 2, 1.0)
    # group 1's 2 best, group 2's 2 best, group 1's next 2, group 2's next 2
    top = torch.tensor([[-1.0, -2.0, -1.5, -1.6, -3.0, -4.0, -2.5, -2.6]])
    at_eos = torch.tensor([[True, False, False, False, False, False, False, False]])
    scores, index = groups.group_slots(top, at_eos)
    assert index.tolist() == [1, 4, 2, 3]  # group 1: its 2nd and 3rd; group 2: its 2 best
    torch.testing.assert_close(scores, torch.tensor([[-2.0, -3.0, -1.5, -1.6]]))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"beam": 5, "beam_groups": 2}, "beam_groups 2 does not divide beam 5"),
        ({"beam": 1, "beam_groups": 1, "sample": True, "group_diversity": 1.0}, "group_diversity"),
        ({"beam": 2, "beam_groups": 2, "sample": True}, "sample draws instead of searching"),
        ({"group_diversity": 2.0}, "group_diversity shapes diverse beam search; set beam_groups"),
    ],
)
def test_groups_that_cannot_be_searched_are_one_line(settings, message):
    with pytest.raises(ValueError, match=message):
        DecodeConfig(**settings)


def test_translate_writes_each_groups_outputs(trained, toy, tmp_path):
    out = tmp_path / "nbest.txt"
    assert run_cli("translate", "--run", trained, "-i", toy / "data/test.src", "-o", out,
                   "--beam", "4", "--beam-groups", "2", "--group-diversity", "2",
                   "--nbest", "4") == 0  # fmt: skip
    lines = out.read_text().splitlines()
    assert len(lines) == 4 * 10 and all(len(line.split("\t")) == 3 for line in lines)
    assert run_cli("evaluate", "--run", trained, "--src", toy / "data/test.src", "--ref",
                   toy / "data/test.tgt", "--beam", "4", "--beam-groups", "2") == 0  # fmt: skip
    translator = Translator.load(trained, beam=4, beam_groups=2)
    with pytest.raises(UserError, match="lexical constraints share a beam's slots among"):
        translator.translate(["a b"], constraints=[["x"]])
    # Sampling asked of it samples, without its groups (as without its beam).
    assert translator.translate(["a b"], sample=True) == Translator.load(trained).translate(
        ["a b"], sample=True
    )


def test_the_diversity_script_measures_lists_and_prints_a_row_per_setting(
    load_script, trained, toy
):
    script = load_script("diverse_nbest")
    same = script.measure([["a cat sat here", "a cat sat here"]], ["a cat sat here"])
    assert same["distinct"] == 1 and same["pairwise BLEU"] == pytest.approx(100)
    assert same["oracle BLEU"] == pytest.approx(100) and same["1-best BLEU"] == pytest.approx(100)
    apart = script.measure([["dogs run far away", "a cat sat here"]], ["a cat sat here"])
    assert apart["distinct"] == 2 and apart["pairwise BLEU"] < 10
    assert apart["oracle BLEU"] == pytest.approx(100) and apart["1-best BLEU"] < 10
    command = [sys.executable, str(SCRIPTS / "diverse_nbest.py"), "--run", str(trained),
               "--src", str(toy / "data/test.src"), "--ref", str(toy / "data/test.tgt"),
               "--beam", "4", "--setting", "1:0", "--setting", "2:1"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[:2] for row in rows[1:]] == [["| 1", "0"], ["| 2", "1"]]
