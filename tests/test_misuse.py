"""Misuse of trained runs and of the commands that read them, through the real command
line: a tampered run directory, empty or odd inputs, a beam too wide, memory running out,
a run started twice, a stop signal. Each gets one line and loses nothing."""

from __future__ import annotations

import codecs
import json
import os
import shutil
import signal
import socket
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli, train
from test_bad_input import one_error_line
from test_resilience import signal_on_step

from seq2seq import checkpoint as checkpoint_module
from seq2seq.checkpoint import RunDir, training_lock
from seq2seq.config.decode import MAX_BEAM
from seq2seq.decode import translate as translate_module
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError
from seq2seq.train import testing as testing_module
from seq2seq.train.trainer import Trainer

TRAINED_WITH = ("train.max_steps=30", "train.valid_every=10")  # conftest's `trained`


def contents(directory: Path) -> dict[str, bytes]:
    """Every file under `directory`, by relative path."""
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


@pytest.fixture
def run_copy(trained, tmp_path, capsys) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    capsys.readouterr()
    return copy


def test_resuming_never_replaces_the_tokenizer_of_a_run_with_checkpoints(toy, run_copy, capsys):
    settings = run_copy / "tokenizer/tokenizer.json"
    edited = json.loads(settings.read_text()) | {"vocab_size": 100}
    settings.write_text(json.dumps(edited))
    kept = contents(run_copy / "tokenizer"), contents(run_copy / "checkpoints")
    assert train(toy, run_copy, *TRAINED_WITH) == 2
    line = one_error_line(capsys)
    assert "tokenizer.json records other settings than the run's config (vocab_size)" in line
    assert (contents(run_copy / "tokenizer"), contents(run_copy / "checkpoints")) == kept

    shutil.rmtree(run_copy / "tokenizer")
    assert train(toy, run_copy, *TRAINED_WITH) == 2
    assert "has checkpoints but no tokenizer/" in one_error_line(capsys)
    assert not (run_copy / "tokenizer").exists()
    assert contents(run_copy / "checkpoints") == kept[1]


@pytest.mark.parametrize(
    "hyp, ref, fragment",
    [(b"", b"", "ref.txt is empty: nothing to score"), (b"a\n", b"", "ref.txt is empty")],
)
def test_evaluating_empty_files_is_one_line(tmp_path, capsys, hyp, ref, fragment):
    (tmp_path / "hyp.txt").write_bytes(hyp)
    (tmp_path / "ref.txt").write_bytes(ref)
    assert run_cli("evaluate", "--hyp", tmp_path / "hyp.txt", "--ref", tmp_path / "ref.txt") == 2
    assert fragment in one_error_line(capsys)


def test_a_byte_order_mark_is_not_text(trained, tmp_path, capsys):
    text = "toto tape un deux trois quatre\ncinq six sept huit neuf\n"
    for name, data in (("plain.txt", text), ("bom.txt", codecs.BOM_UTF8.decode() + text)):
        (tmp_path / name).write_text(data, encoding="utf-8")
    assert run_cli("evaluate", "--hyp", tmp_path / "plain.txt", "--ref", tmp_path / "bom.txt") == 0
    assert capsys.readouterr().out.startswith("BLEU 100.00  chrF 100.00  TER 0.00")
    outputs = []
    for name in ("plain.txt", "bom.txt"):
        out = tmp_path / f"{name}.out"
        assert run_cli("translate", "--run", trained, "-i", tmp_path / name, "-o", out) == 0
        outputs.append(out.read_text())
    assert outputs[0] == outputs[1]


def test_the_beam_is_bounded_in_one_place_for_every_entry_point(trained, tmp_path, capsys):
    source = tmp_path / "src.txt"
    source.write_text("toto tape\n")
    wide = str(MAX_BEAM + 1)
    assert run_cli("translate", "--run", trained, "-i", source, "--beam", wide) == 2
    bound = f"bad decoding option: beam = {wide}: Input should be less than or equal to {MAX_BEAM}"
    assert bound in one_error_line(capsys)
    evaluate = ("evaluate", "--run", trained, "--src", source, "--ref", source)
    assert run_cli(*evaluate, "--beam", wide) == 2
    assert f"bad decoding option: beam = {wide}" in one_error_line(capsys)
    with pytest.raises(UserError, match=f"bad decoding option: beam = {wide}"):
        Translator.load(trained).translate(["toto tape"], beam=MAX_BEAM + 1)
    with pytest.raises(UserError, match=f"bad decoding option: beam = {wide}"):
        Translator.load(trained, beam=MAX_BEAM + 1)


@pytest.mark.parametrize(
    "command",
    [
        ("translate", "--beam", "3"),
        ("evaluate", "--batch-tokens", "50"),
        ("plot-attention", "--src", "toto tape"),
    ],
)
def test_running_out_of_memory_while_translating_is_one_line(
    trained, tmp_path, capsys, monkeypatch, command
):
    def exhausted(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 5.00 GiB")

    monkeypatch.setattr(translate_module, "search", exhausted)
    source = tmp_path / "src.txt"
    source.write_text("toto tape\n")
    inputs = {
        "translate": ("-i", source, "-o", tmp_path / "out.txt"),
        "evaluate": ("--src", source, "--ref", source),
        "plot-attention": ("-o", tmp_path / "a.png"),
    }[command[0]]
    assert run_cli(command[0], "--run", trained, *inputs, *command[1:]) == 1
    line = one_error_line(capsys)
    assert line.startswith("seq2seq: error: out of memory while translating")
    assert "lower --beam or --batch-tokens" in line
    assert " ".join(command[1:]) in line or command[0] == "plot-attention"
    assert not (tmp_path / "out.txt").exists() and not (tmp_path / "a.png").exists()


def test_running_out_of_memory_in_training_names_the_step(toy, tmp_path, capsys, monkeypatch):
    original = Trainer.train_step

    def train_step(self, indices):
        if self.progress.step == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 5.00 GiB")
        return original(self, indices)

    monkeypatch.setattr(Trainer, "train_step", train_step)
    assert train(toy, tmp_path / "r", "train.max_steps=5") == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("seq2seq: error: out of memory at step 2 with train.batch_tokens=200;")
    assert "last.pt is kept" in line


def test_running_out_of_memory_in_the_test_decode_keeps_the_training(
    toy, tmp_path, capsys, monkeypatch
):
    original = testing_module.score_test_sets

    def exhausted(*args):
        raise MemoryError()

    monkeypatch.setattr(testing_module, "score_test_sets", exhausted)
    assert train(toy, tmp_path / "r", "train.max_steps=2") == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("seq2seq: error: out of memory in the test decode with decode.beam=5")
    assert "training is finished and saved" in line and "--set decode.batch_tokens" in line
    monkeypatch.setattr(testing_module, "score_test_sets", original)
    assert train(toy, tmp_path / "r", "train.max_steps=2", "decode.batch_tokens=100") == 0
    assert (tmp_path / "r/test/scores.json").is_file()


def test_running_out_of_memory_anywhere_else_is_one_line(trained, tmp_path, capsys, monkeypatch):
    def exhausted(*args):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 9 GB")

    monkeypatch.setattr(checkpoint_module, "average_checkpoints", exhausted)
    output = tmp_path / "avg.pt"
    assert run_cli("average", "--run", trained, "--last", "1", "-o", output) == 1
    assert one_error_line(capsys) == "seq2seq: error: out of memory; free memory and try again"
    assert not output.exists()


@pytest.mark.parametrize(
    "where, fragments",
    [
        ("config.yaml", ["config.yaml is a file but not a checkpoint (.pt)", "give the run"]),
        ("no-best", ["has no best checkpoint yet", "last.pt", "train.init_from="]),
    ],
)
def test_init_from_names_what_to_give(toy, run_copy, tmp_path, capsys, where, fragments):
    if where == "no-best":
        (run_copy / "checkpoints/best.pt").unlink()
        where = ""
    parent = f"train.init_from={run_copy / where}".rstrip("/")
    assert train(toy, tmp_path / "child", parent, "train.max_steps=1") == 2
    line = one_error_line(capsys)
    assert "--checkpoint" not in line and "runs is not a run directory" not in line
    for fragment in fragments:
        assert fragment in line
    assert not (tmp_path / "child").exists()


def test_a_missing_checkpoint_is_named_without_an_option_the_command_lacks(trained, capsys):
    assert run_cli("average", "--run", trained, "--checkpoints", "step-999") == 2
    line = one_error_line(capsys)
    assert "no checkpoint" in line and "step-999.pt" in line and "--checkpoint " not in line
    assert "name another checkpoint: best, last, step-N or a .pt file" in line


def test_a_run_in_training_is_not_trained_twice_at_once(toy, run_copy, capsys):
    kept = contents(run_copy / "checkpoints")
    with training_lock(RunDir(run_copy)):
        assert train(toy, run_copy, *TRAINED_WITH) == 2
        line = one_error_line(capsys)
    assert f"is being trained by process {os.getpid()} on {socket.gethostname()}" in line
    assert "run the same command again" in line
    assert contents(run_copy / "checkpoints") == kept
    assert train(toy, run_copy, *TRAINED_WITH) == 0  # the lock went with its holder


def test_a_stop_signal_says_so_once(toy, tmp_path, monkeypatch, capsys):
    signal_on_step(monkeypatch, 2, [signal.SIGTERM])
    assert train(toy, tmp_path / "r", "train.max_steps=10") == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert err.count("SIGTERM") == 1, err
    assert err.strip().splitlines()[-1].startswith("seq2seq: training stopped by SIGTERM at step 2")
    log = (tmp_path / "r/train.log").read_text()
    assert "training stopped at step 2: stopped by SIGTERM" in log
    assert "training stopped by SIGTERM at step 2; saved" in log


def test_under_torchrun_only_rank_0_says_why_it_stopped(toy, tmp_path, monkeypatch, capsys):
    """Every process torchrun started gets the signal and stops; one line is enough. (A
    process with RANK=1 and no WORLD_SIZE trains alone, as rank 1 would print.)"""
    monkeypatch.setenv("RANK", "1")
    signal_on_step(monkeypatch, 2, [signal.SIGTERM])
    assert train(toy, tmp_path / "r", "train.max_steps=10") == 128 + signal.SIGTERM
    assert "SIGTERM" not in capsys.readouterr().err
