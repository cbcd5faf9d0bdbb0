"""Minimum Bayes risk (`decode.mbr`): of a line's N candidates, the one of highest mean
utility against all N, as sacrebleu scores it; distinct outputs; the same choice from a
beam's N best and from N samples as `mbr_order` makes of them."""

import json
import random

import pytest
from cli_helpers import run_cli
from sacrebleu.metrics import BLEU, CHRF

from seq2seq.decode.search.mbr import mbr_order
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError

METRICS = [("chrf", CHRF()), ("bleu", BLEU(effective_order=True))]
LINES = ["boka mimi toto tape podo", "", "toto", "mimi tape podo boka", "tape"]


def test_the_consensus_wins_and_each_text_comes_once():
    texts = ["a big red dog runs", "a big red dog ran", "a big red dog runs", "green tea"]
    assert mbr_order(texts, "chrf") == [0, 1, 3]
    assert mbr_order(["one", "two"], "chrf") == [0, 1]  # a tie keeps the search's order


@pytest.mark.parametrize(
    "utility, metric", [("chrf", CHRF()), ("bleu", BLEU(effective_order=True))]
)
def test_the_order_is_that_of_the_mean_utility_written_the_plain_way(utility, metric):
    rng = random.Random(3)
    words = "a man woman dog runs sits on the grass street red".split()
    for _ in range(5):
        texts = [" ".join(rng.choices(words, k=rng.randint(3, 7))) for _ in range(6)]
        texts += texts[:2]  # samples repeat: a repeat counts again as a reference
        mean = [sum(metric.sentence_score(h, [y]).score for y in texts) / len(texts) for h in texts]
        distinct = list(dict.fromkeys(texts))
        expected = sorted(distinct, key=lambda h: -mean[texts.index(h)])
        assert [texts[i] for i in mbr_order(texts, utility)] == expected


@pytest.mark.parametrize("candidates", [{"beam": 4}, {"sample": True, "seed": 5}])
def test_a_line_gets_the_candidate_mbr_order_picks(trained, candidates):
    translator = Translator.load(trained, threads=1)
    found = translator.hypotheses(LINES, nbest=4, attention=False, **candidates)
    chosen = translator.hypotheses(LINES, nbest=2, attention=False, mbr=4, **candidates)
    firsts = []
    for hyps, picked in zip(found, chosen, strict=True):
        texts = [h.text for h in hyps]
        order = mbr_order(texts, "chrf")[:2] if hyps else []
        assert [h.text for h in picked] == [texts[i] for i in order]
        assert [h.score for h in picked] == [hyps[i].score for i in order]  # the model's
        firsts += order[:1]
    assert any(firsts)  # some line's choice is not the search's first
    assert translator.translate(LINES, mbr=4, **candidates) == [
        h[0].text if h else "" for h in chosen
    ]


def test_what_mbr_cannot_choose_from_is_one_line(trained):
    translator = Translator.load(trained, threads=1)
    with pytest.raises(UserError, match="mbr 8 chooses among a beam's 8 best; set beam to"):
        translator.translate(LINES, mbr=8, beam=5)
    with pytest.raises(UserError, match="mbr_utility shapes minimum Bayes risk; set mbr N"):
        translator.translate(LINES, mbr_utility="bleu")
    with pytest.raises(UserError, match="nbest=3 needs as many candidates; set mbr=3"):
        translator.translate(LINES, nbest=3, mbr=2, beam=2)


def test_translate_and_evaluate_take_mbr_on_the_command_line(trained, tmp_path, capsys):
    source, output = tmp_path / "src.txt", tmp_path / "out.txt"
    source.write_text("".join(line + "\n" for line in LINES))
    args = ("--beam", "4", "--mbr", "4", "--mbr-utility", "bleu", "--threads", "1")
    assert run_cli("translate", "--run", trained, "-i", source, "-o", output, *args) == 0
    expected = Translator.load(trained, threads=1).translate(
        LINES, beam=4, mbr=4, mbr_utility="bleu"
    )
    assert output.read_text().splitlines() == expected
    # evaluate decodes the same way: its translation is the reference here, BLEU 100.
    args = ("--src", source, "--ref", output, *args, "--json")
    assert run_cli("evaluate", "--run", trained, *args) == 0
    assert json.loads(capsys.readouterr().out)["bleu"] == 100.0
