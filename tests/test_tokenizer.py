from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data.corpus import read_lines
from seq2seq.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    copy_tokenizer,
    train_tokenizer,
    trained_settings,
)
from seq2seq.data.toy import make_toy_corpus
from seq2seq.data.training_data import prepare_training_data
from seq2seq.errors import UserError

SPECIALS = {PAD_ID, BOS_ID, EOS_ID}


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> dict[str, list[str]]:
    out = tmp_path_factory.mktemp("toy")
    make_toy_corpus(out, seed=3, train=400, valid=50, test=1)
    return {
        "dir": out,
        **{
            name: read_lines(out / f"{name}")
            for name in ("train.src", "train.tgt", "valid.src", "valid.tgt")
        },
    }


@pytest.fixture(scope="module")
def joint(toy, tmp_path_factory) -> tuple[Tokenizer, Path]:
    directory = tmp_path_factory.mktemp("run") / "tokenizer"
    cfg = TokenizerConfig(model_type="bpe", vocab_size=120, joint=True)
    return train_tokenizer(cfg, toy["train.src"], toy["train.tgt"], directory), directory


@pytest.fixture(scope="module")
def separate(toy, tmp_path_factory) -> tuple[Tokenizer, Path]:
    directory = tmp_path_factory.mktemp("run") / "tokenizer"
    cfg = TokenizerConfig(model_type="unigram", vocab_size=60, joint=False)
    return train_tokenizer(cfg, toy["train.src"], toy["train.tgt"], directory), directory


@pytest.mark.parametrize("which", ["joint", "separate"])
def test_round_trip_on_toy_data(which, request, toy) -> None:
    tokenizer, _ = request.getfixturevalue(which)
    targets = toy["valid.tgt"]
    assert tokenizer.decode_tgt(tokenizer.encode_tgt(targets)) == targets
    # There is no decode_src: the source pieces must spell the line back.
    for line in toy["valid.src"]:
        assert "".join(tokenizer.src_pieces(line)).replace("\u2581", " ").strip() == line


def test_joint_decodes_source_ids_too(joint, toy) -> None:
    tokenizer, _ = joint
    lines = toy["valid.src"]
    assert tokenizer.decode_tgt(tokenizer.encode_src(lines)) == lines


def test_joint_writes_one_model_with_one_vocabulary(joint) -> None:
    tokenizer, directory = joint
    assert sorted(p.name for p in directory.iterdir()) == ["joint.model", "tokenizer.json"]
    assert tokenizer.joint
    assert tokenizer.src_vocab_size == tokenizer.tgt_vocab_size
    # One vocabulary: a target word is encoded the same way on both sides.
    assert tokenizer.encode_src(["Coha"]) == tokenizer.encode_tgt(["Coha"])


def test_separate_writes_two_models_with_their_own_vocabularies(separate) -> None:
    tokenizer, directory = separate
    assert sorted(p.name for p in directory.iterdir()) == [
        "src.model",
        "tgt.model",
        "tokenizer.json",
    ]
    assert not tokenizer.joint
    # Capitals only occur in the target language: the source model does not know them.
    assert UNK_ID in tokenizer.encode_src(["Coha"])[0]
    assert UNK_ID not in tokenizer.encode_tgt(["Coha"])[0]


@pytest.mark.parametrize("which", ["joint", "separate"])
def test_ids_exclude_specials_and_specials_are_fixed(which, request, toy) -> None:
    tokenizer, directory = request.getfixturevalue(which)
    ids = tokenizer.encode_src(toy["valid.src"]) + tokenizer.encode_tgt(toy["valid.tgt"])
    assert not any(SPECIALS & set(row) for row in ids)
    assert not any(UNK_ID in row for row in ids)
    pieces = tokenizer.tgt_pieces_from_ids([PAD_ID, UNK_ID, BOS_ID, EOS_ID])
    assert pieces == ["<pad>", "<unk>", "<s>", "</s>"]
    reloaded = Tokenizer.load(directory)
    assert reloaded.joint == tokenizer.joint
    assert reloaded.encode_src(toy["valid.src"]) == tokenizer.encode_src(toy["valid.src"])


def test_decode_ignores_special_ids(joint) -> None:
    tokenizer, _ = joint
    ids = tokenizer.encode_tgt(["Coha Yuzo"])[0]
    padded = [BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]
    assert tokenizer.decode_tgt([padded, ids]) == ["Coha Yuzo", "Coha Yuzo"]
    assert tokenizer.tgt_pieces_from_ids(padded)[-3:] == ["</s>", "<pad>", "<pad>"]


def test_training_is_deterministic(toy, tmp_path: Path) -> None:
    cfg = TokenizerConfig(model_type="unigram", vocab_size=80, joint=True)
    src, tgt = toy["train.src"], toy["train.tgt"]
    train_tokenizer(cfg, src, tgt, tmp_path / "a" / "tok")
    train_tokenizer(cfg, src, tgt, tmp_path / "b" / "tok")
    first = (tmp_path / "a" / "tok" / "joint.model").read_bytes()
    assert first == (tmp_path / "b" / "tok" / "joint.model").read_bytes()


def test_retraining_replaces_the_directory_atomically(toy, tmp_path: Path) -> None:
    directory = tmp_path / "tok"
    src, tgt = toy["train.src"], toy["train.tgt"]
    train_tokenizer(TokenizerConfig(vocab_size=60, joint=True), src, tgt, directory)
    tokenizer = train_tokenizer(TokenizerConfig(vocab_size=60, joint=False), src, tgt, directory)
    assert not tokenizer.joint
    assert sorted(p.name for p in directory.iterdir()) == [
        "src.model",
        "tgt.model",
        "tokenizer.json",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["tok"]  # no temporary leftovers


def test_vocab_size_too_small_is_a_user_error(toy, tmp_path: Path) -> None:
    cfg = TokenizerConfig(vocab_size=8, joint=True)
    with pytest.raises(UserError, match="vocab_size") as info:
        train_tokenizer(cfg, toy["train.src"], toy["train.tgt"], tmp_path / "tok")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "tok").exists()


def test_empty_training_data_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no non-empty sentences"):
        train_tokenizer(TokenizerConfig(), ["", " "], [""], tmp_path / "tok")


def test_load_of_missing_directory_names_it(tmp_path: Path) -> None:
    with pytest.raises(UserError) as info:
        Tokenizer.load(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(info.value)


def test_load_of_a_corrupt_model_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "joint.model").write_bytes(b"garbage")
    with pytest.raises(UserError, match="not a SentencePiece model"):
        Tokenizer.load(tmp_path)


def _data(toy) -> DataConfig:
    train = str(toy["dir"] / "train")
    return DataConfig(src="src", tgt="tgt", train=train, valid=train)


def _ids(side) -> list[list[int]]:
    """Every pair's ids of one side of a prepared corpus."""
    return [row.tolist() for row in side.rows(np.arange(side.pairs))]


def test_an_existing_model_file_is_used_instead_of_training(joint, toy, tmp_path) -> None:
    trained, directory = joint
    cfg = TokenizerConfig(vocab_size=9999, model=str(directory / "joint.model"))
    first = prepare_training_data(_data(toy), cfg, tmp_path / "tokenizer", seed=1)
    assert first.tokenizer.fingerprint == trained.fingerprint  # copied, not trained
    assert _ids(first.corpora[0].src) == trained.encode_src(toy["train.src"])
    messages = []
    log = logging.getLogger("copied")
    log.addHandler(logging.Handler())
    log.handlers[-1].emit = lambda record: messages.append(record.getMessage())
    log.setLevel(logging.INFO)
    again = prepare_training_data(_data(toy), cfg, tmp_path / "tokenizer", seed=1, log=log)
    assert _ids(again.corpora[0].tgt) == _ids(first.corpora[0].tgt) and again.key == first.key
    assert not messages  # nothing copied, trained or prepared again


def test_an_existing_directory_of_separate_models(separate, toy, tmp_path) -> None:
    trained, directory = separate
    cfg = TokenizerConfig(joint=False, model=str(directory))
    made = prepare_training_data(_data(toy), cfg, tmp_path / "tokenizer", seed=1).tokenizer
    assert made.fingerprint == trained.fingerprint and not made.joint
    with pytest.raises(UserError, match="target models; set tokenizer.joint: false"):
        copy_tokenizer(TokenizerConfig(model=str(directory)), tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_unusable_existing_models_are_refused(joint, toy, tmp_path) -> None:
    with pytest.raises(UserError, match="nowhere: no such file or directory"):
        copy_tokenizer(TokenizerConfig(model=str(tmp_path / "nowhere")), tmp_path / "t")
    tabled = tmp_path / "tabled"
    tabled.mkdir()
    shutil.copyfile(joint[1] / "joint.model", tabled / "joint.model")
    (tabled / "vocab.json").write_text('["<pad>", "<unk>", "<s>", "</s>"]')
    with pytest.raises(UserError, match="vocab.json numbers the pieces of src.model and"):
        copy_tokenizer(TokenizerConfig(model=str(tabled)), tmp_path / "t")
    # SentencePiece's own defaults: unk 0, bos 1, eos 2 and no pad.
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(toy["train.src"]),
        model_prefix=str(tmp_path / "theirs"),
        vocab_size=40,
        minloglevel=2,
    )
    with pytest.raises(UserError, match="train it with --pad_id=0 --unk_id=1 --bos_id=2"):
        copy_tokenizer(TokenizerConfig(model=str(tmp_path / "theirs.model")), tmp_path / "t")
    assert not (tmp_path / "t").exists()


def test_settings_recorded_before_a_field_existed_still_match(joint, tmp_path) -> None:
    """A tokenizer.json from before `tokenizer.model` existed lacks it: still the same."""
    _, directory = joint
    old = tmp_path / "old"
    shutil.copytree(directory, old)
    settings = json.loads((old / "tokenizer.json").read_text())
    del settings["model"]
    (old / "tokenizer.json").write_text(json.dumps(settings))
    cfg = TokenizerConfig(model_type="bpe", vocab_size=120, joint=True)
    assert trained_settings(old) == cfg.model_dump()
    (old / "tokenizer.json").write_text(json.dumps({**settings, "vocab_size": 7}))
    assert trained_settings(old) != cfg.model_dump()


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_byte_fallback_spells_an_unseen_character_in_bytes(toy, tmp_path, model_type):
    """Characters the training data never had: <unk> without byte_fallback; with it their
    UTF-8 bytes, both ways, so a translation can write them."""
    unseen = "toto Zürich 東京 🙂"
    found = {}
    for fallback in (False, True):
        cfg = TokenizerConfig(model_type=model_type, vocab_size=400, byte_fallback=fallback)
        directory = tmp_path / f"{model_type}-{fallback}"
        tokenizer = train_tokenizer(cfg, toy["train.src"], toy["train.tgt"], directory)
        found[fallback] = ids = tokenizer.encode_tgt([unseen])[0]
        if fallback:
            assert UNK_ID not in ids and tokenizer.decode_tgt([ids]) == [unseen]
            assert len(ids) >= len(tokenizer.encode_tgt(["toto Zrich  "])[0]) + 12  # 12 bytes
        assert trained_settings(directory)["byte_fallback"] is fallback
    assert found[False].count(UNK_ID) >= 3
