"""The vocabulary shortlist (`decode.shortlist`): IBM model 1 finds the translations a
corpus holds, the restricted output layer is the full one on its pieces and -inf elsewhere,
and translating with it builds the table once, keeps prefixes and phrases, and refuses
what it cannot serve."""

import shutil
from types import SimpleNamespace

import pytest
import torch
from cli_helpers import run_cli
from test_search import source, tiny

from seq2seq.config import DecodeConfig
from seq2seq.decode import shortlist as shortlist_module
from seq2seq.decode.search.hypotheses import Hypothesis
from seq2seq.decode.search.loop import search
from seq2seq.decode.search.prefix import Prefix
from seq2seq.decode.search.strategy import BeamSearch
from seq2seq.decode.search_request import SearchRequest
from seq2seq.decode.shortlist import FILE, Narrowing, Shortlist, build_shortlist
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError


def synthetic_pairs(count=400, seed=0):
    """Source piece 10 + i always translates to target piece 40 + i (i < 8), among words
    that co-occur by chance: piece 5 on both sides of every pair, and a random filler."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(count):
        words = torch.randperm(8, generator=generator)[:3].tolist()
        filler = int(torch.randint(20, 30, (1,), generator=generator))
        yield [5, *(10 + w for w in words), filler], [5, *(40 + w for w in words), filler + 30]


def test_ibm1_finds_each_source_pieces_translation():
    vocab = SimpleNamespace(src_vocab_size=64, tgt_vocab_size=64)
    table = build_shortlist(synthetic_pairs(), vocab)
    best = table.translations[:, 0]
    assert best[10:18].tolist() == list(range(40, 48))  # not piece 5, which is everywhere
    assert best[5].item() == 5  # the piece in every pair is its own best translation
    assert (table.translations[30:40] == -1).all()  # pieces never seen translate to nothing
    assert table.by_frequency[0].item() == 5


def test_a_batchs_pieces_are_its_sources_translations_frequent_special_and_forced_ones():
    translations = torch.full((20, 2), -1)
    translations[3] = torch.tensor([7, 8])
    translations[4, 0] = 9
    by_frequency = torch.tensor([1, 12, *range(13, 300), 0, *range(2, 12)])
    table = Shortlist(translations, by_frequency)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shortlist_module, "FREQUENT", 2)
        patch.setattr(shortlist_module, "WIDTH_STEP", 1)
        pieces = table.pieces(torch.tensor([[3, 0], [4, 4]]), forced=[[15, 16], [17]])
        assert pieces.tolist() == [0, 1, 2, 3, 7, 8, 9, 12, 15, 16, 17]  # specials: own ids
        patch.setattr(shortlist_module, "WIDTH_STEP", 16)  # rounded up with the next frequent
        rounded = table.pieces(torch.tensor([[3]])).tolist()
        assert rounded == [0, 1, 2, 3, 7, 8, 12, *range(13, 22)]


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_the_narrowed_step_is_the_full_one_on_the_shortlist(arch):
    """Its log-probabilities are the full step's over the shortlist, renormalised; it reads
    each token as the piece it numbers; the full layer is back after the block."""
    model = tiny(arch)
    src, mask = source()
    memory = model.encode(src, mask)
    state = model.init_state(memory)
    pieces = torch.tensor([0, 1, 2, 3, 9, 17, 25])
    full = model.decode_step(memory, state, torch.tensor([2, 17, 25])).log_probs
    with Narrowing(pieces).model(model) as narrowed:
        narrow = narrowed.decode_step(memory, state, torch.tensor([2, 5, 6])).log_probs
    torch.testing.assert_close(narrow, full[:, pieces].log_softmax(-1), atol=1e-5, rtol=1e-5)
    again = model.decode_step(memory, state, torch.tensor([2, 17, 25])).log_probs
    torch.testing.assert_close(again, full)


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_a_shortlist_of_every_piece_searches_as_without(arch):
    model = tiny(arch)
    src, mask = source()
    limits = torch.tensor([9, 7, 5])
    plain = search(model, src, mask, limits, BeamSearch(3))
    narrowing = Narrowing(torch.arange(30))
    with narrowing.model(model) as narrowed:
        narrow = narrowing.found(search(narrowed, src, mask, limits, BeamSearch(3)))
    assert [[h.tokens for h in s] for s in narrow] == [[h.tokens for h in s] for s in plain]


def test_a_narrowing_numbers_prefixes_and_phrases_in_and_hypotheses_back():
    narrowing = Narrowing(torch.tensor([0, 1, 2, 3, 10, 20, 30]))
    prefixes, phrases = [Prefix("a", [20, 10]), None], [[[30]], [[10, 30], [20]]]
    request = SearchRequest([[5], [6]], DecodeConfig(), prefixes=prefixes, constraints=phrases)
    numbered = narrowing.request(request)
    assert numbered.prefixes == [Prefix("a", [5, 4]), None]
    assert numbered.constraints == [[[6]], [[4, 6], [5]]]
    found = narrowing.found([[Hypothesis([6, 4, 3], 0.0, None)], []])
    assert found[0][0].tokens == [30, 10, 3] and found[1] == []


@pytest.fixture
def run(trained, tmp_path):
    """A copy of the trained toy run, which the shortlist may write into."""
    return shutil.copytree(trained, tmp_path / "run")


def test_translating_with_a_shortlist_builds_it_once(run, toy, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out.txt"
    lines = (toy / "data/test.src").read_text().splitlines()
    args = ("translate", "--run", run, "-i", toy / "data/test.src", "-o", out, "--shortlist")
    assert run_cli(*args) == 0
    assert "building the vocabulary shortlist" in capsys.readouterr().err
    assert (run / FILE).exists() and len(out.read_text().splitlines()) == len(lines)
    built = shortlist_module.build_shortlist
    monkeypatch.setattr(shortlist_module, "build_shortlist", None)  # a second build fails
    assert run_cli(*args) == 0
    assert "building" not in capsys.readouterr().err
    monkeypatch.setattr(shortlist_module, "build_shortlist", built)
    (run / FILE).write_bytes(b"not a table")  # damaged: built again, not a traceback
    assert run_cli(*args) == 0
    assert "building the vocabulary shortlist" in capsys.readouterr().err


def test_a_shortlist_keeps_prefixes_and_phrases(run, monkeypatch):
    monkeypatch.setattr(shortlist_module, "TRANSLATIONS", 2)  # a short list: rare pieces out
    monkeypatch.setattr(shortlist_module, "FREQUENT", 2)
    monkeypatch.setattr(shortlist_module, "WIDTH_STEP", 1)
    translator = Translator.load(run, shortlist=True)
    tokenizer, line = translator.tokenizer, "toto tape"
    table = Shortlist.of_run(run, translator.origin.config, tokenizer)
    listed = set(table.pieces(torch.tensor(tokenizer.encode_src([line])[0])).tolist())
    words = {p.lstrip("▁") for p in tokenizer.tgt_vocabulary() if p.startswith("▁") and len(p) > 3}
    rare = next(w for w in sorted(words) if not set(tokenizer.encode_tgt([w])[0]) <= listed)
    found = translator.translate([line], beam=4, constraints=[[rare]])[0]
    assert rare in found  # its pieces, which the toy model may go on from
    assert translator.translate([line], prefixes=[rare])[0].startswith(rare)


def test_a_shortlist_refuses_sampling_and_a_translator_without_its_run(trained):
    with pytest.raises(ValueError, match="shortlist narrows a search's vocabulary"):
        DecodeConfig(beam=1, sample=True, shortlist=True)
    loaded = Translator.load(trained)
    bare = Translator(loaded.model, loaded.tokenizer, DecodeConfig(shortlist=True), loaded.device)
    with pytest.raises(UserError, match="decode.shortlist is kept in the run directory"):
        bare.translate(["toto tape"])
