"""Tags (`data.tags`, `decode.tag`): a piece before each source of a corpus in training,
and before the sources translated; a model trained with them follows them."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from cli_helpers import run_cli, train
from prepared_helpers import fake_ids, write_prepared

from seq2seq.checkpoint import RunDir
from seq2seq.config import config_from_dict, load_config
from seq2seq.data.corpus import read_lines
from seq2seq.data.epoch_batches import TrainBatches, TrainingPairs
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError
from seq2seq.train.datasets import load_datasets
from seq2seq.train.validation import Validator

TAG, MARK = "<m>", "Zz"
TRANSFORMER = (
    "model.arch=transformer", "model.embed_dim=16", "model.hidden_dim=16", "model.ff_dim=32",
    "model.encoder_layers=1", "model.decoder_layers=1", "model.attention.type=multihead",
    "model.dropout=0", "train.optimizer.lr=0.01", "train.max_steps=120", "train.valid_every=120",
)  # fmt: skip


@pytest.fixture(scope="module")
def tagged(toy, tmp_path_factory):
    """The toy Transformer trained on its corpus and on a copy whose sources carry the tag
    and whose targets start with MARK: the tag is all that tells the two apart."""
    root = tmp_path_factory.mktemp("tags")
    src, tgt = read_lines(toy / "data/train.src"), read_lines(toy / "data/train.tgt")
    (root / "marked.src").write_text("".join(f"{line}\n" for line in src))
    (root / "marked.tgt").write_text("".join(f"{MARK} {line}\n" for line in tgt))
    corpora = f"data.train=[{toy / 'data/train'}, {root / 'marked'}]"
    assert train(toy, root / "run", corpora, f'data.tags=[null, "{TAG}"]', *TRANSFORMER) == 0
    return root / "run"


def test_a_model_trained_with_tags_follows_them(tagged, toy):
    translator = Translator.load(tagged, beam=1)
    sources = read_lines(toy / "data/valid.src")
    marked = [f"{MARK} {line}" for line in read_lines(toy / "data/valid.tgt")]
    with_tag = translator.translate(sources, tag=TAG)
    without = translator.translate(sources)
    assert sum(line.startswith(MARK) for line in with_tag) >= 0.8 * len(sources)
    assert sum(line.startswith(MARK) for line in without) <= 0.2 * len(sources)
    # the mark's own log-probability, with the tag and without
    first = [
        sum(s.token_scores[0] for s in translator.score(sources, marked, token_scores=True, **tag))
        / len(sources)
        for tag in ({"tag": TAG}, {})
    ]
    assert first[0] > -0.7 and first[0] > first[1] + 2


def test_the_tag_is_the_first_piece_the_model_reads(tagged):
    translator = Translator.load(tagged, beam=1)
    line = "boka mimi toto tape"
    best = translator.hypotheses([line], tag=TAG)[0][0]
    source, _ = translator.attention_labels(line, best)
    assert best.tags == (TAG,) and source[0] == TAG
    assert source[1:] == [*translator.tokenizer.src_pieces(line), "</s>"]
    assert best.attention.size(-1) == len(source)
    words = len(line.split())
    aligned = translator.alignment(line, best)
    assert all(int(pair.split("-")[0]) < words for pair in aligned.split())
    assert translator.align([line], [best.text], tag=TAG) == [aligned]  # forced, as searched
    heads = best.attention.size(1)  # a head's own links: some head links otherwise than the mean
    by_head = [translator.alignment(line, best, head) for head in range(heads)]
    assert any(links != aligned for links in by_head)
    assert translator.align([line], [best.text], head=heads - 1, tag=TAG) == by_head[-1:]
    # a cut source keeps its tag: max_source pieces in all
    translator.max_source = 3
    cut = translator.hypotheses([line], tag=TAG)[0][0]
    assert cut.truncated and cut.attention.size(-1) == 3 + 1
    assert translator.attention_labels(line, cut)[0] == [TAG, *source[1:3], "</s>"]


def test_validation_and_inspection_read_decode_tag(tagged):
    cfg = RunDir(tagged).load_config().model_copy(deep=True)
    cfg.decode.tag = TAG
    data = load_datasets(cfg, RunDir(tagged), logging.getLogger("test"))
    validator = Validator(cfg, data, torch.device("cpu"))
    tag_id = data.tokenizer.src_piece_id(TAG)
    assert all(ids[0] == tag_id for ids in validator.sets[0].src_ids)
    translator = Translator.load(tagged)
    result = validator(translator.model)
    valid = data.valid[0]
    greedy = translator.translate(valid.src, beam=1, tag=TAG)
    assert result.hypotheses == {"": greedy}
    refs = valid.ref
    inspected = [
        Translator.load(tagged, **tag).attention_diagnostics(valid.src, refs)["sites"]
        for tag in ({"tag": TAG}, {})
    ]
    assert inspected[0] != inspected[1]


def test_a_tag_the_model_was_not_trained_with_is_refused_in_one_line(tagged, trained, capsys):
    with pytest.raises(UserError, match=r"tag <x> is not one this model was trained with .*<m>"):
        Translator.load(tagged).translate(["toto"], tag="<x>")
    with pytest.raises(UserError, match="it was trained with none"):
        Translator.load(trained).translate(["toto"], tag=TAG)
    with pytest.raises(UserError, match="bad decoding option: tag"):
        Translator.load(tagged).translate(["toto"], tag="a b")
    source = tagged.parent / "one.src"
    source.write_text("toto\n")
    assert run_cli("translate", "--run", tagged, "-i", source, "--tag", "<x>") == 2
    assert "tag <x> is not one this model" in capsys.readouterr().err


def test_the_server_takes_a_tag_per_request(tagged):
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    from fastapi.testclient import TestClient

    from seq2seq.serve.app import create_app
    from seq2seq.serve.schema import ServeLimits
    from seq2seq.serve.server import model_info

    translator, limits = Translator.load(tagged, beam=1), ServeLimits()
    lines = ["boka mimi toto", "tape podo"]
    with TestClient(create_app(translator, model_info(translator, limits), limits)) as client:
        assert client.get("/info").json()["tags"] == [TAG]
        answer = client.post("/translate", json={"text": lines, "tag": TAG})
        texts = [line["text"] for line in answer.json()["translations"]]
        assert texts == translator.translate(lines, tag=TAG)
        refused = client.post("/translate", json={"text": lines, "tag": "<x>"})
        assert refused.status_code == 422
        assert refused.json()["error"] == (
            "tag <x> is not one this model was trained with (data.tags); give one of <m>"
        )


def test_ctranslate2_reads_the_tag_as_the_torch_engine_does(tagged, toy, tmp_path):
    pytest.importorskip("ctranslate2", reason="the export extra is not installed")
    from seq2seq.decode.ctranslate2_engine import CTranslate2Translator

    assert run_cli("export", "--run", tagged, "--output", tmp_path / "ct2") == 0
    assert TAG in (tmp_path / "ct2/README.md").read_text()
    sources = read_lines(toy / "data/test.src")
    ours = Translator.load(tagged, beam=1).hypotheses(sources, tag=TAG)
    theirs = CTranslate2Translator.load(tmp_path / "ct2", beam=1).hypotheses(sources, tag=TAG)
    assert [h[0].tokens for h in ours] == [h[0].tokens for h in theirs]


def test_a_tagged_corpus_s_sources_start_with_its_tag_and_count_it(tmp_path):
    """Two corpora, the second tagged (id 7): its rows start with the tag, its lengths count
    it, and so does data.max_len (a source of max_len pieces fits untagged, not tagged)."""
    src, tgt = fake_ids([3, 5, 4, 2]), fake_ids([2, 3, 3, 4], seed=1)
    corpora = [write_prepared(tmp_path / name, src, tgt) for name in ("plain", "tagged")]
    pairs = TrainingPairs(corpora, [[], [7]])
    assert pairs.longest("src") == 6 and pairs.longest("tgt") == 4
    batches = TrainBatches(pairs, max_len=5, batch_tokens=1000, seed=1)
    assert len(batches) == 7  # the tagged copy of the 5-piece source is dropped
    batch = batches.batch(list(range(7)))
    rows = [row[: int(n) - 1].tolist() for row, n in zip(batch.src, batch.src_lengths, strict=True)]
    assert rows == [*src, [7, *src[0]], [7, *src[2]], [7, *src[3]]]
    assert torch.equal(batch.tgt_out[4:], batch.tgt_out[[0, 2, 3]])  # targets untouched
    assert batch.tgt_out[4:, 0].tolist() == [tgt[0][0], tgt[2][0], tgt[3][0]]


DATA = {"src": "de", "tgt": "en", "train": ["a", "b"], "valid": "v"}


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"data": DATA | {"tags": ["<bt>"]}}, "tags has 1 values for 2 training corpora"),
        ({"data": DATA | {"tags": [None, "a b"]}}, "'a b' is not one piece"),
        ({"data": DATA | {"tags": [None, "</s>"]}}, "</s> is a special piece"),
        ({"data": DATA | {"tags": [None, "\u2581"]}}, "holds \u2581, which starts every word"),
        ({"decode": {"tag": "<bt>"}}, "decode.tag <bt> is not a tag the model trains with"),
        ({"tokenizer": {"user_symbols": ["x", "x"]}}, "x is given twice"),
    ],
)
def test_bad_tags_are_one_line_each(changes, error):
    with pytest.raises(UserError, match=error):
        config_from_dict({"data": DATA} | changes)


def test_a_trained_tokenizer_keeps_each_tag_whole_and_a_given_one_must(toy, trained, capsys):
    tags = {"data": DATA | {"tags": ["<a>", "<b>"]}, "tokenizer": {"user_symbols": ["<b>", "@"]}}
    assert config_from_dict(tags).tokenizer.user_symbols == ["<b>", "@", "<a>"]
    given = tags | {"tokenizer": {"model": "joint.model"}}
    assert config_from_dict(given).tokenizer.user_symbols == []
    config = toy / "given.yaml"
    cfg = load_config(toy / "run.yaml").to_dict()
    cfg["data"]["tags"] = [TAG]
    cfg["tokenizer"]["model"] = str(trained / "tokenizer/joint.model")
    config.write_text(json.dumps(cfg))
    assert run_cli("prepare", "--config", config, "--run-dir", toy / "given") == 2
    assert "data.tags: <m> is not a piece of tokenizer.model" in capsys.readouterr().err


def test_a_tag_the_training_text_holds_is_refused(toy, tmp_path, capsys):
    """A source word as a tag would become the tag wherever the word stands."""
    word = read_lines(toy / "data/train.src")[0].split()[0]
    tags = f'data.tags=["{word}"]'
    assert train(toy, tmp_path / "run", tags, "train.max_steps=1") == 2
    assert f"data.tags: {word} occurs in the training text" in capsys.readouterr().err
