import json

import pytest
import torch
from cli_helpers import run_cli

from seq2seq.data.alignments import piece_words
from seq2seq.data.corpus import read_lines
from seq2seq.decode.alignment import alignment_error_rate, pharaoh, word_alignment
from seq2seq.decode.forced import forced_translations
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError


def test_pieces_map_to_the_words_they_belong_to():
    assert piece_words(["▁the", "▁sun", "ny", "▁day"]) == [0, 1, 1, 2]
    assert piece_words(["sun", "ny", "▁day"]) == [0, 0, 1]
    assert piece_words(["▁", "Ü", "▁x"]) == [0, 0, 1]


def test_each_target_piece_links_to_its_most_attended_source_word():
    src = ["▁ein", "▁Hund", "e", "▁läuft"]  # 3 words
    tgt = ["▁a", "▁dog", "▁run", "s"]  # 3 words
    weights = torch.zeros(len(tgt) + 1, len(src) + 1)  # + EOS row and column
    for j, i in enumerate([0, 2, 3, 3]):
        weights[j, i] = 1.0
    weights[-1, -1] = 1.0
    pairs = word_alignment(weights, src, tgt, 3, 3)
    assert pairs == [(0, 0), (1, 1), (2, 2)]
    assert pharaoh(pairs) == "0-0 1-1 2-2"
    heads = torch.stack([weights, weights.roll(1, dims=1)], dim=1)  # (T, heads, S)
    heads[:, 1] = 0.0
    assert word_alignment(heads, src, tgt, 3, 3) == pairs  # heads averaged


def test_one_head_links_by_its_own_weights():
    src, tgt = ["▁a", "▁b", "▁c"], ["▁x", "▁y"]
    heads = torch.zeros(3, 2, 4)  # (T + 1, heads, S + 1)
    heads[0, 0, 0] = heads[1, 0, 1] = 1.0  # head 0: x-a, y-b
    heads[0, 1, 2] = heads[1, 1, 2] = 0.9  # head 1: x-c, y-c
    assert word_alignment(heads, src, tgt, 3, 2, head=0) == [(0, 0), (1, 1)]
    assert word_alignment(heads, src, tgt, 3, 2, head=1) == [(2, 0), (2, 1)]
    assert word_alignment(heads, src, tgt, 3, 2) == [(0, 0), (1, 1)]  # the mean: 0.5 > 0.45


def test_links_outside_the_words_are_dropped_and_empty_output_has_none():
    weights = torch.eye(3)
    assert word_alignment(weights, ["▁a", "▁b"], ["▁x", "▁y"], 2, 1) == [(0, 0)]
    assert word_alignment(torch.ones(1, 3), ["▁a", "▁b"], [], 2, 0) == []


def test_alignment_error_rate_counts_sure_and_possible_links():
    # A = {0-0, 1-1, 2-1}; S = {0-0, 2-2}; P = S + {1-1}: |A&S| = 1, |A&P| = 2
    scores = alignment_error_rate(["0-0 1-1 2-1", ""], ["0-0 1?1 2-2", ""])
    assert (scores.links, scores.sure, scores.possible) == (3, 2, 3)
    assert scores.aer == pytest.approx(1 - (1 + 2) / (3 + 2))
    assert scores.precision == pytest.approx(2 / 3) and scores.recall == pytest.approx(1 / 2)
    assert scores.to_dict()["aer"] == 40.0 and str(scores).startswith("AER 40.00")
    perfect = alignment_error_rate(["1-0 0-1", "0-0"], ["0-1 1-0 1?1", "0-0"])
    assert perfect.aer == 0 and perfect.recall == 1 and perfect.precision == 1


@pytest.mark.parametrize(
    ("hypotheses", "gold", "error"),
    [
        (["0-0"], ["0-0", "1-1"], "1 alignment lines but 2 gold lines"),
        (["0-0 1:1"], ["0-0"], "alignment line 1: '1:1' is not a link"),
        (["0-0"], ["0-x"], "gold line 1: '0-x' is not a link"),
    ],
)
def test_malformed_alignments_are_one_line_each(hypotheses, gold, error):
    with pytest.raises(UserError, match=error):
        alignment_error_rate(hypotheses, gold)


def test_forced_attention_is_the_attention_of_a_search_held_to_the_same_pieces(trained, toy):
    """A greedy search made to start with each reference (its prefix) attends over it as
    the teacher-forced steps over the reference do."""
    translator = Translator.load(trained, beam=1)
    sources, references = read_lines(toy / "data/test.src"), read_lines(toy / "data/test.tgt")
    found = [hyps[0] for hyps in translator.hypotheses(sources, prefixes=references)]
    forced = forced_translations(translator, sources, references, translator.decode)
    for best, again in zip(found, forced, strict=True):
        n = len(again.tokens)
        assert best.tokens[:n] == again.tokens
        torch.testing.assert_close(again.attention[:n], best.attention[:n], atol=1e-5, rtol=0)
    scored = [s.normalised for s in translator.score(sources, references)]  # in one pass
    assert [t.score for t in forced] == pytest.approx(scored, abs=1e-4)
    aligned = translator.align(sources, references)
    assert aligned[0] == translator.alignment(sources[0], forced[0])
    assert len(set(aligned)) > 1 and translator.align(["toto", " "], [" ", "Coha"]) == ["", ""]


def test_score_writes_forced_alignments_and_attention_and_evaluate_alignments_scores_them(
    trained, toy, tmp_path, capsys
):
    data, out, weights = toy / "data", tmp_path / "forced.align", tmp_path / "forced.jsonl"
    assert run_cli("score", "--run", trained, "--src", data / "test.src", "--ref",
                   data / "test.tgt", "--alignments", out, "--attention", weights) == 0  # fmt: skip
    translator = Translator.load(trained)
    sources, references = read_lines(data / "test.src"), read_lines(data / "test.tgt")
    assert read_lines(out) == translator.align(sources, references)
    forced = translator.forced(sources, references)
    records = [json.loads(line) for line in read_lines(weights)]
    pairs = zip(sources, forced, strict=True)
    assert records == [translator.attention_record(line, again) for line, again in pairs]
    drawn = translator.attention_map(sources[0], references[0])
    assert (drawn.src_pieces, drawn.tgt_pieces) == (records[0]["source"], records[0]["target"])
    capsys.readouterr()
    gold = data / "test.align"
    assert run_cli("evaluate-alignments", "--gold", gold, "--hyp", out, "--json") == 0
    printed = json.loads(capsys.readouterr().out)
    expected = alignment_error_rate(read_lines(out), read_lines(gold))
    assert printed == expected.to_dict() and printed["pairs"] == len(sources)
    png = tmp_path / "forced.png"
    assert run_cli("plot-attention", "--run", trained, "--src", sources[0], "--ref",
                   references[0], "-o", png) == 0  # fmt: skip
    assert png.read_bytes()[:4] == b"\x89PNG" and capsys.readouterr().out == references[0] + "\n"


def test_alignment_heads_are_chosen_in_range_and_only_with_alignments(trained, toy, capsys):
    """The RNN's attention is one head: head 0 is it, head 1 is refused in one line, and a
    head without --alignments is refused before any work."""
    translator = Translator.load(trained)
    sources, references = read_lines(toy / "data/test.src"), read_lines(toy / "data/test.tgt")
    assert translator.align(sources, references, head=0) == translator.align(sources, references)
    with pytest.raises(UserError, match=r"alignment head 1: .* has 1 head \(0 to 0\)"):
        translator.align(sources, references, head=1)
    data = toy / "data"
    args = ("score", "--run", trained, "--src", data / "test.src", "--ref", data / "test.tgt")
    assert run_cli(*args, "--alignment-head", "0") == 2
    assert "pass --alignments FILE too" in capsys.readouterr().err
