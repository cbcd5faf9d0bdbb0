"""Preparing a training corpus: done once and never read again while it is right; prepared
again, never used, when its text, its tokenizer or a prepared file changed; and no fault
(a full disk, a kill, a second process) leaves a half-written corpus taken as complete."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli

from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data import corpus, corpus_encoder, prepared_corpus
from seq2seq.data.corpus_encoder import CORPORA, preparation_lock
from seq2seq.data.epoch_batches import TrainBatches, TrainingPairs
from seq2seq.data.prepared_corpus import MANIFEST
from seq2seq.data.sources import corpus_source
from seq2seq.data.tokenizer import Tokenizer, train_tokenizer
from seq2seq.data.training_data import prepare_training_data
from seq2seq.errors import ResourceError, UserError

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = TokenizerConfig(vocab_size=120)


@pytest.fixture
def text(toy, tmp_path) -> DataConfig:
    """A copy of the toy training corpus, which a test may change."""
    for side in ("src", "tgt"):
        shutil.copy(toy / f"data/train.{side}", tmp_path / f"train.{side}")
    train = str(tmp_path / "train")
    return DataConfig(src="src", tgt="tgt", train=train, valid=train)


class Log(logging.Logger):
    def __init__(self) -> None:
        super().__init__("test-preparation", logging.INFO)
        self.lines: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: self.lines.append(record.getMessage())
        self.addHandler(handler)

    def said(self, fragment: str) -> bool:
        return any(fragment in line for line in self.lines)


def prepare(data: DataConfig, directory: Path, log: logging.Logger | None = None):
    return prepare_training_data(data, TOKENIZER, directory, seed=1, log=log)


def ids(corpus) -> tuple[list[list[int]], list[list[int]]]:
    every = np.arange(corpus.pairs)
    return tuple([row.tolist() for row in side.rows(every)] for side in (corpus.src, corpus.tgt))


def only_corpus(directory: Path) -> Path:
    (found,) = (directory / CORPORA).iterdir()
    return found


def test_a_prepared_corpus_is_opened_without_reading_or_hashing(text, tmp_path, monkeypatch):
    first = prepare(text, tmp_path / "tok")
    assert first.corpora[0].src.dtype == np.uint16  # 120 pieces
    encoded = Tokenizer.load(tmp_path / "tok").encode_src(corpus.read_lines(tmp_path / "train.src"))
    assert ids(first.corpora[0])[0] == encoded

    def forbidden(*args, **kwargs):
        raise AssertionError("read or hashed again")

    monkeypatch.setattr(corpus, "raw_lines", forbidden)
    monkeypatch.setattr(prepared_corpus, "file_sha256", forbidden)
    log = Log()
    again = prepare(text, tmp_path / "tok", log)
    assert ids(again.corpora[0]) == ids(first.corpora[0]) and again.key == first.key
    assert not log.lines


def test_a_changed_text_is_prepared_again(text, tmp_path):
    first = prepare(text, tmp_path / "tok")
    lines = (tmp_path / "train.tgt").read_text().splitlines()
    lines[5] = "Zoza Zoza Zoza"
    (tmp_path / "train.tgt").write_text("\n".join(lines) + "\n")
    log = Log()
    again = prepare(text, tmp_path / "tok", log)
    assert log.said("train.tgt changed since it was prepared)") and log.said("preparing it again")
    assert again.key != first.key
    assert ids(again.corpora[0]) != ids(first.corpora[0])


def test_a_copied_text_of_the_same_content_is_hashed_once_not_prepared(text, tmp_path):
    first = prepare(text, tmp_path / "tok")
    later = time.time() + 100
    os.utime(tmp_path / "train.src", (later, later))  # as a copy or a touch would leave it
    log = Log()
    again = prepare(text, tmp_path / "tok", log)
    assert not log.said("prepar") and again.key == first.key
    manifest = json.loads((only_corpus(tmp_path / "tok") / MANIFEST).read_text())
    assert manifest["sources"]["src"]["mtime_ns"] == (tmp_path / "train.src").stat().st_mtime_ns


# Edits of a manifest that its files cannot contradict (issue 69, item 5).
EDITS = {
    "longest": lambda m: m["longest"].update(src=1),
    "tokens": lambda m: m["tokens"].update(src=m["tokens"]["src"] + 1),
    "empty": lambda m: m.update(empty=m.get("empty", 0) + 3),
    "sample": lambda m: m.update(sample={"alpha": 0.5}),
}


@pytest.mark.parametrize(
    "damage",
    ["truncated", "altered", "manifest", "no manifest", *(f"edited {e}" for e in EDITS)],
)
def test_a_damaged_prepared_corpus_is_prepared_again(text, tmp_path, damage):
    first = ids(prepare(text, tmp_path / "tok").corpora[0])
    where = only_corpus(tmp_path / "tok")
    if damage == "truncated":
        data = (where / "tgt.ids").read_bytes()
        (where / "tgt.ids").write_bytes(data[:-2])
    elif damage == "altered":  # same size, other content: only the hash can tell
        data = bytearray((where / "src.ids").read_bytes())
        data[10] ^= 1
        (where / "src.ids").write_bytes(bytes(data))
    elif damage == "manifest":
        (where / MANIFEST).write_text("{not json")
    elif damage.startswith("edited"):  # each would end training in a traceback, or pass
        manifest = json.loads((where / MANIFEST).read_text())
        EDITS[damage.removeprefix("edited ")](manifest)
        (where / MANIFEST).write_text(json.dumps(manifest))
    else:
        (where / MANIFEST).unlink()
    log = Log()
    again = prepare(text, tmp_path / "tok", log)
    assert log.said("cannot be used") and log.said("preparing it again")
    assert ids(again.corpora[0]) == first


def test_a_file_truncated_under_a_running_run_is_one_line_then_prepared_again(text, tmp_path):
    made = prepare(text, tmp_path / "tok")
    data = TrainBatches(TrainingPairs(made.corpora), 100, 200, 1)
    batches = list(data.epoch(0))
    os.truncate(only_corpus(tmp_path / "tok") / "src.ids", 10)  # no map: no SIGBUS
    with pytest.raises(UserError, match=r"src.ids is shorter than when it was prepared"):
        for indices in batches:
            data.batch(indices)
    log = Log()
    prepare(text, tmp_path / "tok", log)  # the same command again
    assert log.said("truncated or altered after it was written") and log.said("preparing")


def test_another_tokenizer_prepares_the_corpus_again(text, tmp_path):
    made = prepare(text, tmp_path / "tok")
    other = train_tokenizer(
        TokenizerConfig(vocab_size=80), ["aa bb cc"] * 50, ["dd ee"] * 50, tmp_path / "other"
    )
    log = Log()
    corpus_again = corpus_encoder.prepare_corpus(
        other, tmp_path / "tok", corpus_source(text.train), (text.src, text.tgt), log
    )
    assert log.said("prepared with another tokenizer")
    assert corpus_again.manifest["tokenizer"] == other.fingerprint != made.tokenizer.fingerprint


def test_a_full_disk_leaves_nothing_and_the_next_start_prepares(text, tmp_path, monkeypatch):
    tokenizer_dir = tmp_path / "tok"
    monkeypatch.setattr(corpus_encoder, "CHUNK_PAIRS", 100)
    written = []

    def fill_up(self, array):
        written.append(len(array))
        if len(written) > 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.handle.write(np.ascontiguousarray(array).data)

    with monkeypatch.context() as patch:
        patch.setattr(prepared_corpus._HashedFile, "write", fill_up)
        with pytest.raises(ResourceError, match="No space left on device; free some space"):
            prepare(text, tokenizer_dir)
    assert list((tokenizer_dir / CORPORA).iterdir()) == []  # no corpus, no temporary one
    assert ids(prepare(text, tokenizer_dir).corpora[0])[0]


def test_a_preparation_killed_halfway_is_prepared_whole_by_the_next(text, tmp_path):
    """A real SIGKILL in the middle of writing: what it left is never taken as complete."""
    tokenizer_dir = tmp_path / "tok"
    clean = ids(prepare(text, tmp_path / "clean").corpora[0])
    shutil.copytree(tmp_path / "clean", tokenizer_dir, ignore=shutil.ignore_patterns(CORPORA))
    killer = f"""
import os, signal, sys
sys.path.insert(0, {str(ROOT)!r})
from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data import corpus_encoder, prepared_corpus
from seq2seq.data.training_data import prepare_training_data
corpus_encoder.CHUNK_PAIRS = 100
add = prepared_corpus.CorpusWriter.add
def add_then_die(self, src, tgt, links=None):
    add(self, src, tgt, links)
    os.kill(os.getpid(), signal.SIGKILL)
prepared_corpus.CorpusWriter.add = add_then_die
data = DataConfig(src="src", tgt="tgt", train={text.train!r}, valid={text.train!r})
prepare_training_data(data, TokenizerConfig(vocab_size=120), {str(tokenizer_dir)!r}, seed=1)
"""
    done = subprocess.run([sys.executable, "-c", killer], capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    leftovers = list((tokenizer_dir / CORPORA).iterdir())
    assert leftovers and all(p.name.startswith(".") for p in leftovers)  # only temporary
    log = Log()
    assert ids(prepare(text, tokenizer_dir, log).corpora[0]) == clean
    assert log.said("preparing")
    assert [p.name for p in (tokenizer_dir / CORPORA).iterdir()] == [
        only_corpus(tmp_path / "clean").name
    ]


def test_a_second_process_waits_for_the_first_then_uses_its_work(text, toy, tmp_path):
    run = tmp_path / "run"
    args = ["prepare", toy / "run.yaml", "--run-dir", run, "--set", f"data.train={text.train}"]
    command = [sys.executable, "-m", "seq2seq", *map(str, args)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with preparation_lock(run / "tokenizer"):  # the first process, still preparing
        second = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        waiting = second.stderr.readline()
        assert "another process is preparing" in waiting and "waiting for it" in waiting
        assert second.poll() is None  # it waits
        time.sleep(0.5)
        assert not (run / "tokenizer").exists()
    _, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert "prepared 300 training pairs" in err
    log = Log()
    prepare(text, run / "tokenizer", log)  # a third finds it all done
    assert not log.lines


def test_a_text_that_changes_while_it_is_prepared_is_refused(text, tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_encoder, "CHUNK_PAIRS", 100)
    add = prepared_corpus.CorpusWriter.add

    def add_and_edit(self, src, tgt, links=None):
        add(self, src, tgt, links)
        later = time.time() + 100
        os.utime(tmp_path / "train.src", (later, later))  # rewritten meanwhile

    tokenizer_dir = tmp_path / "tok"
    train_tokenizer(TOKENIZER, ["aa bb"] * 20, ["cc dd"] * 20, tokenizer_dir)
    monkeypatch.setattr(prepared_corpus.CorpusWriter, "add", add_and_edit)
    with pytest.raises(UserError, match="train.src changed while it was prepared; run the"):
        corpus_encoder.prepare_corpus(
            Tokenizer.load(tokenizer_dir), tokenizer_dir, corpus_source(text.train), ("src", "tgt")
        )
    assert list((tokenizer_dir / CORPORA).iterdir()) == []


def test_several_corpora_are_each_prepared_once_and_shared(text, toy, tmp_path):
    for side in ("src", "tgt"):
        shutil.copy(toy / f"data/valid.{side}", tmp_path / f"extra.{side}")
    both = text.model_copy(update={"train": [text.train, str(tmp_path / "extra")]})
    made = prepare(both, tmp_path / "tok")
    assert [c.pairs for c in made.corpora] == [300, 12]
    assert len(list((tmp_path / "tok" / CORPORA).iterdir())) == 2
    log = Log()
    alone = prepare(text, tmp_path / "tok", log)  # one of them, for another run: no work
    assert not log.lines
    assert ids(alone.corpora[0]) == ids(made.corpora[0]) and alone.key != made.key


def test_prepare_then_train_does_no_preparation_again(toy, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli("prepare", toy / "run.yaml", "--run-dir", run) == 0
    err = capsys.readouterr().err
    assert "preparing" in err and "prepared 300 training pairs" in err
    assert run_cli("train", toy / "run.yaml", "--run-dir", run, "--set", "train.max_steps=1") == 0
    log = (run / "train.log").read_text()
    assert log.count("preparing") == 1 and log.count("training a bpe") == 1  # prepare's


def test_prepare_refuses_to_replace_the_tokenizer_of_a_run_with_checkpoints(toy, tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli("train", toy / "run.yaml", "--run-dir", run, "--set", "train.max_steps=2") == 0
    capsys.readouterr()
    code = run_cli(
        "prepare", toy / "run.yaml", "--run-dir", run, "--set", "tokenizer.vocab_size=99"
    )
    assert code == 2
    assert "holds a run with another config (tokenizer.vocab_size" in capsys.readouterr().err
