"""Target prefixes: every output starts with its prefix, verbatim, and decodes on from it; the
prefix's pieces are teacher-forced, so that a hypothesis scores what forced scoring gives."""

import pytest
import torch
from cli_helpers import run_cli
from test_search import ARCHS, EOS, source, tiny

from seq2seq.data.padded_batches import make_batch
from seq2seq.decode.forced import forced_token_log_probs
from seq2seq.decode.search import loop
from seq2seq.decode.search.beams import SearchSettings, length_penalty
from seq2seq.decode.search.prefix import Prefix, Prefixes
from seq2seq.decode.search.sampling import Sampler
from seq2seq.decode.search.strategy import BeamSearch
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError

STARTS = torch.zeros(30, dtype=torch.bool)  # the pieces 10-19 "start a word", and EOS
STARTS[10:20] = STARTS[EOS] = True


@pytest.mark.parametrize("arch", ARCHS)
def test_a_prefix_of_the_greedy_output_gives_the_greedy_output(arch):
    model = tiny(arch)
    src, mask = source()
    limits = torch.tensor([9, 7, 6])
    free = loop.search(
        model, src, mask, limits, BeamSearch(1), SearchSettings(nbest=1, alpha=1.0, min_length=0)
    )
    for pieces in (1, 3):
        given = Prefixes.of([Prefix("p", h[0].tokens[:pieces]) for h in free], STARTS)
        found = loop.search(
            model,
            src,
            mask,
            limits,
            BeamSearch(1),
            SearchSettings(nbest=1, alpha=1.0, min_length=0, prefixes=given),
        )
        assert [h[0].tokens for h in found] == [h[0].tokens for h in free]
        assert [h[0].score for h in found] == pytest.approx([h[0].score for h in free], abs=1e-5)


SOURCES = [[5, 9, 12, 7, 22], [4, 6, 8], [11, 13], [9, 9]]
# The third repeats itself and ends in whitespace; the fourth does not fit its limit.
PREFIXES = [Prefix("a", [15, 7]), None, Prefix("b ", [7, 7, 7]), Prefix("c", [20] * 5)]
SEARCHES = {
    "beam": (BeamSearch(4), {"nbest": 3}),
    "repeats": (BeamSearch(4), {"nbest": 3, "no_repeat_ngram": 1}),
    "samples": (Sampler.for_lines([0, 1, 2, 3], 3, 12, 1, torch.device("cpu")), {"nbest": 3}),
}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("search", list(SEARCHES))
def test_every_hypothesis_starts_with_its_prefix_and_scores_what_forced_scoring_gives(arch, search):
    model = tiny(arch)
    batch = make_batch(SOURCES, None, [0, 1, 2, 3])
    strategy, options = SEARCHES[search]
    settings = SearchSettings(alpha=1.0, prefixes=Prefixes.of(PREFIXES, STARTS), **options)
    limits = torch.tensor([9, 7, 8, 3])
    found = loop.search(model, batch.src, batch.src_mask, limits, strategy, settings)
    hyps = [(i, h) for i, hyps in enumerate(found) for h in hyps]
    assert all(len(found[i]) == 3 for i in range(3)) and found[3]
    for i, h in hyps:
        prefix = PREFIXES[i].ids if PREFIXES[i] else []
        rest = h.tokens[len(prefix) :]
        assert h.tokens[: len(prefix)] == prefix
        assert i != 2 or not rest or STARTS[rest[0]]  # a word starts after "b "
        if search == "repeats":  # no piece twice, but the prefix's own
            assert len(set(rest)) == len(rest) and not set(rest) & set(prefix)
    assert found[3][0].tokens == [20] * 5  # its limit raised to fit the prefix and EOS
    pairs = make_batch([SOURCES[i] for i, _ in hyps], [h.tokens for _, h in hyps],
                       list(range(len(hyps))))  # fmt: skip
    forced = forced_token_log_probs(model, pairs, [len(h.tokens) + 1 for _, h in hyps]).sum(-1)
    for (_, h), total in zip(hyps, forced.tolist(), strict=True):
        assert total / length_penalty(len(h.tokens) + 1.0, 1.0) == pytest.approx(h.score, abs=1e-4)


LINES = ["boka mimi toto tape podo", "toto", "mimi tape podo boka", "tape", "", "podo"]


@pytest.fixture(scope="module")
def translator(trained) -> Translator:
    return Translator.load(trained, device="cpu")


def test_translations_start_with_their_prefix_verbatim(translator):
    tokenizer = translator.tokenizer
    greedy = [hyps[0] for hyps in translator.hypotheses(LINES, beam=1, attention=False) if hyps]
    first = greedy[0].text.split()[0]
    prefixes = [greedy[0].text[:2], first + " ", "", "  two  spaces, ünïcode 🙂", "Za", "   "]
    word = len(tokenizer.encode_tgt([first])[0])  # the pieces of `first + " "`
    after = []  # the pieces after it
    for options in ({"beam": 3, "nbest": 2}, {"sample": True, "seed": 2, "nbest": 2}):
        found = translator.hypotheses(LINES, prefixes=prefixes, attention=False, **options)
        assert found[4] == []  # a blank line stays blank, whatever its prefix
        for prefix, hyps in zip(prefixes[:4], found[:4], strict=True):
            assert hyps and all(h.text.startswith(prefix) for h in hyps), hyps
        after += [h.tokens[word] for h in found[1] if len(h.tokens) > word]
        # Where the prefix is what its pieces say, the text is theirs as SentencePiece joins them.
        assert [h.text for h in found[0]] == tokenizer.decode_tgt([h.tokens for h in found[0]])
    assert after and all(piece.startswith("▁") for piece in tokenizer.tgt_pieces_from_ids(after))
    # A prefix longer than the line's limit raises it, for every step of samples too.
    assert translator.translate(LINES[3:4], prefixes=prefixes[3:4], sample=True) == prefixes[3:4]
    # A prefix that is the start of the greedy output changes nothing (nor does a blank one),
    # where its text gives its pieces again.
    lines = [line for line in LINES if line]
    starts = [tokenizer.decode_tgt([h.tokens[:2]])[0] for h in greedy]
    kept = [s if tokenizer.encode_tgt([s])[0] == h.tokens[:2] else "   "
            for s, h in zip(starts, greedy, strict=True)]  # fmt: skip
    assert any(s.strip() for s in kept)
    assert translator.translate(lines, beam=1, prefixes=kept) == [h.text for h in greedy]


def test_bad_prefixes_are_one_line(translator):
    cases = [
        (["a"], UserError, "prefixes has 1 line but the input has 6; give one prefix per input"),
        ("a", TypeError, "pass prefixes as a list of lines"),
        ([None] * 6, TypeError, "prefixes[0] is NoneType, not str"),
        (["\ud800"] * 6, UserError, "prefixes[0]: character 0 is a lone surrogate"),
        (["", "Za\tri", *[""] * 4], UserError, "prefixes[1]: character 2 is a tab, which would"),
        (["", "", "Za\u2028", *[""] * 3], UserError, "prefixes[2]: character 2 is a line break"),
    ]
    for prefixes, error, message in cases:
        with pytest.raises(error, match=message.replace("[", r"\[")):
            translator.translate(LINES, prefixes=prefixes)


def test_the_command_line_reads_a_prefix_file_line_by_line(translator, trained, tmp_path, capsys):
    source, prefixes = tmp_path / "src.txt", tmp_path / "prefixes.txt"
    source.write_text("".join(line + "\n" for line in LINES[:3]))
    prefixes.write_text("Za\n\nri \n")
    out = tmp_path / "out.txt"
    args = ["translate", "--run", trained, "-i", source, "-o", out, "--device", "cpu"]
    assert run_cli(*args, "--prefix-file", prefixes, "--beam", "2", "--nbest", "2") == 0
    rows = [row.split("\t") for row in out.read_text().splitlines()]
    expected = translator.translate(LINES[:3], beam=2, nbest=2, prefixes=["Za", "", "ri "])
    assert [text for _, _, text in rows] == [text for texts in expected for text in texts]
    assert rows[0][2].startswith("Za") and rows[5][2].startswith("ri ")
    out.unlink()
    for text, why in [("Za\n\n", " has 2 lines but the input has 3"),
                      ("Za\nri\tpo\n\n", ", line 2: character 2 is a tab")]:  # fmt: skip
        prefixes.write_text(text)
        assert run_cli(*args, "--prefix-file", prefixes) == 2
        err = capsys.readouterr().err.strip()
        assert f"{prefixes}{why}" in err and len(err.splitlines()) == 1, err
        assert not out.exists()  # nothing written
