"""Lexical constraints in beam search (decode/constraints.py): every output contains its
sentence's phrases, an exhaustive search finds the best outputs that do, and sentences
without phrases are searched as before."""

import argparse

import pytest
import torch
from cli_helpers import run_cli
from test_search import ARCHS, EOS, every_output, sequence_log_prob, source, tiny

from seq2seq.data.tokenizer import UNK_ID
from seq2seq.decode.search.beams import SearchSettings, length_penalty
from seq2seq.decode.search.constraints import ConstrainedBeams, ConstrainedBeamSearch, Progress
from seq2seq.decode.search.loop import search
from seq2seq.decode.search.phrases import Constraints
from seq2seq.decode.search.prefix import Prefix, Prefixes
from seq2seq.decode.search.strategy import BeamSearch
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError


def contains(output: list[int], phrase: list[int]) -> bool:
    return any(output[i : i + len(phrase)] == phrase for i in range(len(output)))


def walk(phrases: list[list[int]], tokens: list[int]) -> Progress:
    """The progress of one hypothesis after `tokens`."""
    constraints = Constraints.of([phrases], torch.device("cpu"))
    progress = Progress.start(1, len(phrases), torch.device("cpu"))
    for token in tokens:
        progress = progress.after(torch.tensor([token]), constraints.tokens, constraints.lengths)
    return progress


@pytest.mark.parametrize(
    "phrases, tokens, met, position",
    [
        ([[7, 8, 9], [4]], [7, 8], [False, False], [2, 0]),
        ([[7, 8, 9], [4]], [7, 8, 9], [True, False], [0, 0]),
        ([[7, 8, 9], [4]], [7, 8, 5, 7, 8, 9], [True, False], [0, 0]),  # started over
        ([[7, 8, 9], [4]], [7, 7, 8, 9], [True, False], [0, 0]),  # the second 7 starts it
        ([[7, 8, 9], [4]], [4, 7, 8, 9], [True, True], [0, 0]),  # one piece: met at once
        ([[7, 8, 9], [4]], [7, 4, 9], [False, True], [0, 0]),
        ([[7, 8], [7, 9]], [7], [False, False], [1, 1]),  # both under way
        ([[7, 8], [7, 9]], [7, 9, 7], [False, True], [1, 0]),
        ([[7], [7, 9]], [7, 9], [True, True], [0, 0]),  # one inside the other: both met
    ],
)
def test_progress_follows_every_phrase_piece_by_piece(phrases, tokens, met, position):
    progress = walk(phrases, tokens)
    assert progress.met[0].tolist() == met and progress.position[0].tolist() == position
    lengths = torch.tensor([[len(p) for p in phrases]])
    assert bool(progress.complete(lengths)[0]) == all(met)
    placed = sum(len(p) for p, m in zip(phrases, met, strict=True) if m) + max(position)
    assert int(progress.pieces_met(lengths)[0]) == placed


@pytest.mark.parametrize("arch", ARCHS)
def test_an_exhaustive_beam_finds_the_best_outputs_that_hold_the_phrases(arch):
    """Every output of at most 4 tokens over 6 ids, scored the plain way: the 8 best that
    contain both phrases, in order and at their scores."""
    vocab, limit, alpha = 6, 5, 1.0
    model = tiny(arch, vocab)
    src, mask = source((5,))
    phrases = [[4, 5], [1]]
    scored = sorted(
        (
            sequence_log_prob(model, src, mask, seq) / float(length_penalty(len(seq) + 1.0, alpha)),
            seq,
        )
        for seq in every_output(vocab, limit)
        if all(contains(seq, phrase) for phrase in phrases)
    )[::-1]
    beam = vocab ** (limit - 1)  # every open prefix kept, every EOS among the K best
    found = search(
        model,
        src,
        mask,
        torch.tensor([limit]),
        ConstrainedBeamSearch(beam, Constraints.of([phrases], torch.device("cpu"))),
        SearchSettings(nbest=8, alpha=alpha, stopping="exact"),
    )[0]
    assert [h.tokens for h in found] == [seq for _, seq in scored[:8]]
    assert [h.score for h in found] == pytest.approx([score for score, _ in scored[:8]], abs=1e-4)
    plain = search(
        model,
        src,
        mask,
        torch.tensor([limit]),
        BeamSearch(beam),
        SearchSettings(nbest=1, alpha=alpha),
    )
    assert plain[0][0].tokens != found[0].tokens  # the phrases changed the best output


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("beam", [2, 5])
def test_every_output_of_a_narrow_beam_holds_its_phrases(arch, beam):
    model = tiny(arch)
    src, mask = source((6, 4, 2))
    phrases = [[[7, 8, 9], [11]], [], [[12, 13], [12, 14]]]  # the last two start alike
    limits = torch.tensor([6, 5, 3])  # raised to fit the phrases and the EOS
    found = search(
        model,
        src,
        mask,
        limits,
        ConstrainedBeamSearch(beam, Constraints.of(phrases, torch.device("cpu"))),
        SearchSettings(nbest=beam, alpha=0.5),
    )
    plain = search(
        model, src, mask, limits, BeamSearch(beam), SearchSettings(nbest=beam, alpha=0.5)
    )
    for sentence, hypotheses in zip(phrases, found, strict=True):
        assert hypotheses
        for hypothesis in hypotheses:
            assert all(contains(hypothesis.tokens, phrase) for phrase in sentence)
    assert not any(contains(h.tokens, [7, 8, 9]) for h in plain[0])
    # A sentence without phrases among others with some: the search it would have alone.
    alone = search(
        model,
        src[1:2, :4],
        mask[1:2, :, :4],
        limits[1:2],
        BeamSearch(beam),
        SearchSettings(nbest=beam, alpha=0.5),
    )
    assert [h.tokens for h in found[1]] == [h.tokens for h in alone[0]]


@pytest.mark.parametrize("arch", ARCHS)
def test_no_phrases_is_the_plain_search(arch):
    model = tiny(arch)
    src, mask = source()
    limits = torch.tensor([9, 7, 4])
    none = Constraints.of([[], [], []], torch.device("cpu"))
    for beam in (2, 4):
        plain = search(
            model, src, mask, limits, BeamSearch(beam), SearchSettings(nbest=2, alpha=1.0)
        )
        constrained = search(
            model,
            src,
            mask,
            limits,
            ConstrainedBeamSearch(beam, none),
            SearchSettings(nbest=2, alpha=1.0),
        )
        for a, b in zip(plain, constrained, strict=True):
            assert [h.tokens for h in a] == [h.tokens for h in b]
            assert [h.score for h in a] == pytest.approx([h.score for h in b])


def test_a_sentence_whose_phrases_cannot_be_placed_has_no_output():
    model = tiny("rnn")
    src, mask = source((4, 3))
    phrases = Constraints.of([[[7, 7]], [[9]]], torch.device("cpu"))
    # No output repeats a piece (no_repeat_ngram 1), so none can hold 7 7.
    found = search(
        model,
        src,
        mask,
        torch.tensor([6, 6]),
        ConstrainedBeamSearch(3, phrases),
        SearchSettings(nbest=2, alpha=0.0, no_repeat_ngram=1),
    )
    assert found[0] == [] and found[1] and all(contains(h.tokens, [9]) for h in found[1])


LINES = ["boka mimi toto tape podo", "toto", "mimi tape podo boka", "tape", "", "podo"]
PHRASES = [["Qozoxu"], [], ["Zuqu", "Foxo Coha"], ["Jowa"], [], []]


@pytest.fixture(scope="module")
def translator(trained) -> Translator:
    return Translator.load(trained, device="cpu")


def test_each_translation_holds_its_line_s_phrases(translator):
    found = translator.hypotheses(LINES, nbest=2, beam=5, constraints=PHRASES, attention=False)
    plain = translator.hypotheses(LINES, nbest=2, beam=5, attention=False)
    for phrases, hyps, free in zip(PHRASES, found, plain, strict=True):
        assert all(phrase in h.text for h in hyps for phrase in phrases)
        assert not any(h.unconstrained for h in hyps)
        if not phrases:  # a line without phrases, among lines with some: as if alone
            assert [h.text for h in hyps] == [h.text for h in free]
    assert "Qozoxu" not in plain[0][0].text and found[4] == []
    best = translator.translate(LINES, beam=5, constraints=PHRASES)
    assert best == [hyps[0].text if hyps else "" for hyps in found]


def test_a_line_whose_phrases_cannot_be_held_is_translated_without_them(translator):
    blocked = {"beam": 4, "no_repeat_ngram": 1}  # no output repeats a piece
    found = translator.hypotheses(
        LINES[:2], constraints=[["Zuqu Zuqu"], ["Zuqu"]], attention=False, **blocked
    )
    alone = translator.hypotheses(LINES[:1], attention=False, **blocked)
    assert found[0][0].unconstrained and found[0][0].text == alone[0][0].text
    assert not found[1][0].unconstrained and "Zuqu" in found[1][0].text


def test_a_phrase_with_characters_the_vocabulary_lacks_is_written_as_given(translator):
    """The phrase "naïve" has an ï no target piece holds: the output holds the phrase as
    given (as a prefix would), never the unknown piece's mark, and counts as constrained."""
    assert translator.tokenizer.encode_tgt(["naïve"])[0].count(UNK_ID) == 1
    found = translator.hypotheses(LINES[:2], beam=5, constraints=[["naïve"], ["Dvořák"]])
    for hyps, phrase in zip(found, ["naïve", "Dvořák"], strict=True):
        assert phrase in hyps[0].text and "⁇" not in hyps[0].text
        assert not hyps[0].unconstrained


def test_bad_constraints_are_one_line(translator):
    cases = [
        ({"constraints": [["Zu\tqu"], *[[]] * 5]}, UserError, "character 2 is a tab"),
        ({"constraints": [["Zuqu"]] * 5}, UserError, "constraints has 5 lines but the input has 6"),
        ({"constraints": [["Zuqu", " "], *[[]] * 5]}, UserError, r"constraints\[0\]: an empty"),
        ({"constraints": "Zuqu"}, TypeError, "a list of lists of phrases"),
        ({"constraints": ["Zuqu", *[[]] * 5]}, TypeError, r"constraints\[0\] is str"),
        ({"constraints": PHRASES, "beam": 1}, UserError, "need a beam of at least 2"),
        ({"constraints": PHRASES, "sample": True}, UserError, "need beam search; drop sample"),
    ]
    for arguments, kind, message in cases:
        with pytest.raises(kind, match=message):
            translator.translate(LINES, **arguments)


def test_the_command_line_reads_a_constraint_file(translator, trained, tmp_path, capsys):
    source, constraints = tmp_path / "src.txt", tmp_path / "constraints.txt"
    source.write_text("".join(line + "\n" for line in LINES[:3]))
    constraints.write_text("Qozoxu\n\nZuqu\tFoxo Coha\n")
    out = tmp_path / "out.txt"
    args = ["translate", "--run", trained, "-i", source, "-o", out, "--device", "cpu"]
    assert run_cli(*args, "--constraints", constraints, "--beam", "5") == 0
    expected = translator.translate(LINES[:3], beam=5, constraints=PHRASES[:3])
    assert out.read_text().splitlines() == expected
    constraints.write_text("Zuqu Zuqu\n\n\n")
    assert (
        run_cli(*args, "--constraints", constraints, "--beam", "4", "--no-repeat-ngram", "1") == 0
    )
    assert (
        "1 input line is translated unconstrained, as no hypothesis held the phrases (line 1)"
        in (capsys.readouterr().err)
    )
    out.unlink()
    constraints.write_text("Zuqu\n")
    assert run_cli(*args, "--constraints", constraints) == 2
    err = capsys.readouterr().err.strip()
    assert f"{constraints} has 1 line but the input has 3" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_reference_constraints_are_each_line_s_longest_words(load_script):
    longest = load_script("reference_constraints").longest_words
    assert longest("A man rides a bicycle down the street.", 1) == ["bicycle"]
    assert longest("A man rides a bicycle down the street.", 2) == ["bicycle", "street"]
    assert longest("Two dogs run", 2) == ["Two", "dogs"]  # ties: the first
    assert longest("", 1) == []


def test_a_hypothesis_that_met_its_phrases_finishes_where_its_bank_gives_it_a_slot():
    """Row 0 has met the phrase and may end (EOS, -5); row 1 has not, and its continuations
    score better (-1, -2, -3; the phrase's piece -9). Of K = 2 slots, one goes to each
    bank: the EOS is among the first K candidates, which is where the search finishes."""
    cpu = torch.device("cpu")
    met = Progress(torch.tensor([[True], [False]]), torch.zeros(2, 1, dtype=torch.long))
    beams = ConstrainedBeams(Constraints.of([[[7]]], cpu), met)
    cumulative = torch.full((2, 10), -torch.inf)
    cumulative[0, EOS] = -5.0
    cumulative[1, [4, 5, 6, 7]] = torch.tensor([-1.0, -2.0, -3.0, -9.0])
    top_scores, index = cumulative.view(1, -1).topk(4)
    origin, token = index.view(-1) // 10, index.view(-1) % 10
    beams, scores, origin, token = beams.widen(
        cumulative, 2, top_scores, origin, token, torch.zeros(2, dtype=torch.long)
    )
    assert list(zip(origin[:2].tolist(), token[:2].tolist(), strict=True)) == [(0, EOS), (1, 4)]
    assert scores[0, :2].tolist() == [-5.0, -1.0]
    slots_scores, slots = beams.allocate(scores, token.view_as(scores) == EOS, 2)
    assert [(int(origin[s]), int(token[s])) for s in slots] == [(1, 7), (1, 4)]  # a slot a bank


def test_bench_decodes_with_constraints(load_script, trained, toy, tmp_path):
    bench = load_script("bench_decode")
    (tmp_path / "phrases.txt").write_text("Zuqu\n" * 10)
    args = argparse.Namespace(
        run=[trained], checkpoint="best", input=toy / "data/test.src", ref=toy / "data/test.tgt",
        limit=None, threads=1, busy=0, decode={}, device="cpu",
        constraints=tmp_path / "phrases.txt",
    )  # fmt: skip
    measured = bench.measure_decode(args, "torch", 4, None)
    assert measured["constraints"] == str(tmp_path / "phrases.txt") and measured["sentences"] == 10


def test_constraints_with_a_prefix_come_after_it_or_within_it():
    model = tiny("transformer")
    src, mask = source((5, 4))
    prefixes = Prefixes.of([Prefix("x", [11, 12]), None], torch.ones(30, dtype=torch.bool))
    phrases = Constraints.of([[[12, 13], [20]], [[20]]], torch.device("cpu"))
    found = search(
        model,
        src,
        mask,
        torch.tensor([6, 6]),
        ConstrainedBeamSearch(4, phrases),
        SearchSettings(nbest=4, prefixes=prefixes),
    )
    assert found[0] and all(h.tokens[:2] == [11, 12] for h in found[0])
    assert all(contains(h.tokens, [12, 13]) and 20 in h.tokens for h in found[0])
    assert found[1] and all(20 in h.tokens for h in found[1])


def test_an_ensemble_and_mbr_keep_to_the_phrases(trained):
    ensemble = Translator.load([trained, trained], device="cpu")
    texts = ensemble.translate(LINES, beam=4, nbest=2, constraints=PHRASES)
    chosen = ensemble.translate(LINES, beam=4, mbr=4, constraints=PHRASES)
    for phrases, best, mbr in zip(PHRASES, texts, chosen, strict=True):
        assert all(phrase in text for text in [*best, mbr] for phrase in phrases)
