"""The corpus id cache: a second tokenization of the same corpus is a read, never wrong."""

from __future__ import annotations

import logging

import pytest

from seq2seq.config import TokenizerConfig
from seq2seq.data.id_cache import CACHE_DIR, encode_corpus
from seq2seq.data.tokenizer import train_tokenizer

SRC = [f"das ist satz nummer {i} und er ist kurz" for i in range(60)]
TGT = [f"this is sentence number {i} and it is short" for i in range(60)]


@pytest.fixture
def tokenizer_dir(tmp_path):
    directory = tmp_path / "tokenizer"
    train_tokenizer(TokenizerConfig(vocab_size=60, model_type="bpe"), SRC, TGT, directory)
    return directory


class CountingTokenizer:
    """A tokenizer that counts how often it is asked to encode."""

    def __init__(self, directory):
        from seq2seq.data.tokenizer import Tokenizer

        self.inner = Tokenizer.load(directory)
        self.calls = 0

    def encode_src(self, lines):
        self.calls += 1
        return self.inner.encode_src(lines)

    def encode_tgt(self, lines):
        self.calls += 1
        return self.inner.encode_tgt(lines)


def test_second_encoding_reads_the_cache_and_gives_the_same_ids(tokenizer_dir):
    tokenizer = CountingTokenizer(tokenizer_dir)
    first = encode_corpus(tokenizer, tokenizer_dir, SRC, TGT)
    assert tokenizer.calls == 2
    second = encode_corpus(tokenizer, tokenizer_dir, SRC, TGT)
    assert tokenizer.calls == 2  # not tokenized again
    assert second == first
    assert first[:2] == (tokenizer.inner.encode_src(SRC), tokenizer.inner.encode_tgt(TGT))
    assert len(list((tokenizer_dir / CACHE_DIR).glob("*.pt"))) == 1


def test_a_changed_corpus_misses_the_cache(tokenizer_dir):
    tokenizer = CountingTokenizer(tokenizer_dir)
    encode_corpus(tokenizer, tokenizer_dir, SRC, TGT)
    changed = [*TGT[:-1], "a different last line"]
    src_ids, tgt_ids, _ = encode_corpus(tokenizer, tokenizer_dir, SRC, changed)
    assert tokenizer.calls == 4
    assert tgt_ids == tokenizer.inner.encode_tgt(changed)
    assert len(list((tokenizer_dir / CACHE_DIR).glob("*.pt"))) == 2


def test_a_damaged_cache_is_tokenized_again_with_a_warning(tokenizer_dir, caplog):
    tokenizer = CountingTokenizer(tokenizer_dir)
    expected = encode_corpus(tokenizer, tokenizer_dir, SRC, TGT)
    (cache,) = (tokenizer_dir / CACHE_DIR).glob("*.pt")
    cache.write_bytes(cache.read_bytes()[:50])
    log = logging.getLogger("test-id-cache")
    with caplog.at_level(logging.WARNING, logger="test-id-cache"):
        assert encode_corpus(tokenizer, tokenizer_dir, SRC, TGT, log) == expected
    assert "damaged" in caplog.text
    assert tokenizer.calls == 4
    assert encode_corpus(tokenizer, tokenizer_dir, SRC, TGT) == expected  # rewritten whole
    assert tokenizer.calls == 4


def test_a_second_run_on_the_same_data_reads_the_ids(toy, tmp_path, caplog):
    from seq2seq.checkpoint import RunDir
    from seq2seq.config import load_config
    from seq2seq.train.datasets import load_datasets

    cfg = load_config(toy / "run.yaml")
    run = RunDir(tmp_path / "run")
    log = logging.getLogger("test-id-cache-run")
    with caplog.at_level(logging.INFO, logger="test-id-cache-run"):
        first = load_datasets(cfg, run, log)
        assert "read from" not in caplog.text
        second = load_datasets(cfg, run, log)
    assert "piece ids of 300 pairs read from" in caplog.text
    assert second.train.src == first.train.src and second.train.tgt == first.train.tgt
