"""Token scores: the log-probability the model gave each token of a hypothesis (and its
EOS), read back from the search: they are what teacher-forcing the output gives, step by
step, however the hypothesis was found."""

import json

import pytest
import torch
from cli_helpers import run_cli
from test_search import ARCHS, BOS, EOS, source, tiny

from seq2seq.decode.search import loop
from seq2seq.decode.search.beams import SearchSettings
from seq2seq.decode.search.constraints import ConstrainedBeamSearch
from seq2seq.decode.search.phrases import Constraints
from seq2seq.decode.search.prefix import Prefix, Prefixes
from seq2seq.decode.search.sampling import Sampler
from seq2seq.decode.search.strategy import BeamSearch
from seq2seq.decode.translate import Translator


def forced_steps(model, src, mask, tokens) -> list[float]:
    """log p of each of `tokens` and then EOS, teacher-forced the plain way."""
    tgt_in = torch.tensor([[BOS, *tokens]])
    with torch.no_grad():
        log_probs = model(src, mask, tgt_in).log_softmax(-1)[0]
    return [float(log_probs[t, y]) for t, y in enumerate([*tokens, EOS])]


SEARCHES = {
    "greedy": (1, {}),
    "beam": (4, {"nbest": 4, "alpha": 1.0}),
    "samples": (3, {"nbest": 3}),
    "constraints": (4, {"nbest": 2}),
}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("search", list(SEARCHES))
def test_token_scores_are_the_teacher_forced_log_probabilities(arch, search):
    model = tiny(arch)
    src, mask = source((6, 4, 2))
    limits = torch.tensor([9, 7, 5])
    beam, options = SEARCHES[search]
    strategy = BeamSearch(beam)
    if search == "samples":
        strategy = Sampler(torch.rand(3, 3, 12, generator=torch.Generator().manual_seed(1)))
    if search == "constraints":
        phrases = Constraints.of([[[7, 8]], [], [[9]]], torch.device("cpu"))
        strategy = ConstrainedBeamSearch(beam, phrases)
    scored = SearchSettings(token_scores=True, **options)
    found = loop.search(model, src, mask, limits, strategy, scored)
    plain = loop.search(model, src, mask, limits, strategy, SearchSettings(**options))
    for row, (hyps, without) in enumerate(zip(found, plain, strict=True)):
        length = int(mask[row, 0].sum())
        one = src[row : row + 1, :length], mask[row : row + 1, :, :length]
        assert [h.tokens for h in hyps] == [h.tokens for h in without]  # the same search
        assert all(h.token_scores is None for h in without)
        for h in hyps:
            assert len(h.token_scores) == len(h.tokens) + 1
            assert h.token_scores == pytest.approx(forced_steps(model, *one, h.tokens), abs=1e-4)


def test_a_prefix_s_pieces_have_their_scores_too():
    model = tiny("transformer")
    src, mask = source((5,))
    prefixes = Prefixes.of([Prefix("x", [11, 12])], torch.ones(30, dtype=torch.bool))
    found = loop.search(
        model,
        src,
        mask,
        torch.tensor([8]),
        BeamSearch(3),
        SearchSettings(nbest=1, prefixes=prefixes, token_scores=True),
    )[0][0]
    assert found.tokens[:2] == [11, 12]
    assert found.token_scores == pytest.approx(
        forced_steps(model, src, mask, found.tokens), abs=1e-4
    )


LINES = ["boka mimi toto tape podo", "", "toto"]


@pytest.fixture(scope="module")
def translator(trained) -> Translator:
    return Translator.load(trained, device="cpu")


def test_translations_carry_their_pieces_scores(translator):
    found = translator.hypotheses(LINES, beam=3, nbest=2, token_scores=True, attention=False)
    assert found[1] == [] and all(t.token_scores is None for t in translator.hypotheses(LINES)[0])
    for hyps in (found[0], found[2]):
        for t in hyps:
            record = translator.token_score_record(t.tokens, t.token_scores)
            assert len(record["pieces"]) == len(record["scores"]) == len(t.tokens) + 1
            assert record["pieces"][-1] == "</s>" and all(s <= 0 for s in record["scores"])
            lp = (len(t.tokens) + 1) ** translator.decode.length_penalty
            assert sum(t.token_scores) == pytest.approx(t.score * lp, abs=1e-3)


def test_the_command_line_writes_token_scores(translator, trained, tmp_path, capsys):
    source, out, scores = tmp_path / "src.txt", tmp_path / "out.txt", tmp_path / "scores.jsonl"
    source.write_text("".join(line + "\n" for line in LINES))
    args = [
        "translate",
        "--run",
        trained,
        "-i",
        source,
        "-o",
        out,
        "--device",
        "cpu",
        "--beam",
        "3",
    ]
    assert run_cli(*args, "--token-scores", scores) == 0
    records = [json.loads(line) for line in scores.read_text().splitlines()]
    best = translator.hypotheses(LINES, beam=3, token_scores=True, attention=False)
    assert records[1] is None and records[0] == translator.token_score_record(
        best[0][0].tokens, best[0][0].token_scores
    )
    assert out.read_text().splitlines() == translator.translate(LINES, beam=3)


def test_token_scores_is_a_bool(translator):
    with pytest.raises(TypeError, match="token_scores must be a bool, not str"):
        translator.hypotheses(LINES, token_scores="yes")


def test_score_gives_a_given_translation_s_token_scores(translator, trained, tmp_path):
    outputs = translator.hypotheses(LINES, beam=3, token_scores=True, attention=False)
    refs = [hyps[0].text if hyps else "" for hyps in outputs]
    forced = translator.score(LINES, refs, token_scores=True, length_penalty=0.0)
    same = 0
    for hyps, score in zip(outputs, forced, strict=True):
        assert sum(score.token_scores) == pytest.approx(score.log_prob, abs=1e-4)
        # Where the text splits into the search's pieces again, the search's own scores.
        if hyps and score.pieces == hyps[0].tokens:
            assert score.token_scores == pytest.approx(hyps[0].token_scores, abs=1e-4)
            same += 1
    assert same
    assert translator.score(LINES, refs)[0].token_scores is None
    src, ref, out = tmp_path / "src.txt", tmp_path / "ref.txt", tmp_path / "scores.jsonl"
    src.write_text("".join(line + "\n" for line in LINES))
    ref.write_text("".join(line + "\n" for line in refs))
    args = ["score", "--run", trained, "--src", src, "--ref", ref, "-o", tmp_path / "s.tsv"]
    assert run_cli(*args, "--device", "cpu", "--token-scores", out) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records == [translator.token_score_record(s.pieces, s.token_scores) for s in forced]
    assert records[1] == {"pieces": ["</s>"], "scores": [round(forced[1].token_scores[0], 4)]}
