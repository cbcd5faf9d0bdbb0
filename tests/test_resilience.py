"""Training survives kills, stop signals, corrupt checkpoints and non-finite updates."""

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from cli_helpers import run_cli, train

from seq2seq import device, files
from seq2seq.train import testing as testing_module
from seq2seq.train import update
from seq2seq.train.trainer import Trainer


def checkpoint(run_dir: Path, name: str = "last") -> dict:
    return torch.load(run_dir / "checkpoints" / f"{name}.pt", weights_only=True)


def same_parameters(a: Path, b: Path) -> bool:
    x, y = checkpoint(a)["model"], checkpoint(b)["model"]
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def start_training(toy: Path, run_dir: Path, *overrides: str) -> subprocess.Popen:
    """`seq2seq train` in a subprocess, to be killed or signalled."""
    sets = [x for o in overrides for x in ("--set", o)]
    command = [sys.executable, "-m", "seq2seq", "train", "--config", str(toy / "run.yaml"),
               "--run-dir", str(run_dir), *sets]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for_step(process: subprocess.Popen, run_dir: Path, step: int) -> None:
    """Until the log reports update `step`."""
    log, deadline = run_dir / "train.log", time.time() + 120
    while not (log.is_file() and f"step {step} " in log.read_text()):
        assert time.time() < deadline and process.poll() is None, f"no step {step}"
        time.sleep(0.01)


# The kill point is drawn at random, from a fixed seed so that a failure reproduces.
KILL_SEED = 36


def test_sigkill_at_a_random_step_then_resuming_equals_an_uninterrupted_run(
    toy, six_steps, tmp_path
):
    killed = tmp_path / "killed"
    budget = ["train.max_steps=6"]  # as `six_steps`: a resume checkpoint at 2, 4 and 6

    picker = random.Random(KILL_SEED)  # its own generator: training in this process seeds `random`
    step = picker.randrange(1, 4)  # before, while or after the first checkpoint is written
    print(f"killed after step {step}")  # to reproduce a failure
    process = start_training(toy, killed, *budget)
    wait_for_step(process, killed, step)
    process.kill()
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL

    # Resumed twice: a resumed run's own checkpoints must resume exactly too.
    assert train(toy, killed, "train.max_steps=4") == 0
    assert train(toy, killed, *budget) == 0
    assert "from step 4" in (killed / "train.log").read_text()
    assert same_parameters(six_steps, killed)
    moments, resumed = (
        checkpoint(six_steps)["optimizer"]["state"],
        checkpoint(killed)["optimizer"]["state"],
    )
    assert all(torch.equal(moments[p][n], resumed[p][n]) for p in moments for n in moments[p])


def test_sigterm_saves_a_checkpoint_that_resumes_exactly(toy, trained, tmp_path):
    stopped = tmp_path / "stopped"
    budget = ["train.max_steps=30", "train.valid_every=100"]  # `trained` took 30 steps

    process = start_training(toy, stopped, "train.max_steps=100000", "train.valid_every=100")
    wait_for_step(process, stopped, 3)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    message = err.decode().strip().splitlines()[-1]
    assert "stopped by SIGTERM" in message and "resume with the same command" in message
    step = checkpoint(stopped)["progress"]["step"]
    assert 3 <= step < 30, step

    # Fields that do not change what is trained may change on resume too.
    untrained = ["train.log_every=5", "train.keep_best=1", "decode.beam=2", "train.heatmaps=1",
                 "data.valid_alignments=true"]  # fmt: skip
    assert train(toy, stopped, *budget, *untrained) == 0
    assert same_parameters(trained, stopped)


def test_a_truncated_checkpoint_falls_back_and_is_never_kept(toy, six_steps, tmp_path, monkeypatch):
    damaged = tmp_path / "damaged"
    assert train(toy, damaged, "train.max_steps=4") == 0  # validations at 2 and 4
    assert checkpoint(damaged, "previous")["progress"]["step"] == 2
    last = damaged / "checkpoints/last.pt"
    last.write_bytes(last.read_bytes()[:1000])
    # previous.pt after each save: the corrupt last.pt must never become it, or a kill
    # during the next write would leave no loadable checkpoint at all.
    kept, save_last = [], Trainer.save_last

    def save_and_look(self):
        save_last(self)
        kept.append(checkpoint(damaged, "previous")["progress"]["step"])

    monkeypatch.setattr(Trainer, "save_last", save_and_look)
    assert train(toy, damaged, "train.max_steps=6") == 0
    log = (damaged / "train.log").read_text()
    assert "last.pt is corrupt or truncated" in log and "previous.pt (step 2)" in log
    assert kept == [2, 4]  # resumed at 2: saves at 4 (keeping 2) and 6
    assert same_parameters(six_steps, damaged)


def test_resuming_removes_the_half_checkpoint_a_kill_left(toy, six_steps, tmp_path):
    run = tmp_path / "r"
    shutil.copytree(six_steps, run)
    killed = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                            capture_output=True, text=True, check=True)  # fmt: skip
    orphan = run / f"checkpoints/.last.pt.{int(killed.stdout)}-0a1b2c3d.tmp"
    orphan.write_bytes(b"the first megabytes of a checkpoint")
    assert train(toy, run, "train.max_steps=8") == 0
    assert not orphan.exists() and not list(run.rglob("*.tmp"))


def nan_on_calls(monkeypatch, calls: set[int]) -> None:
    """Make the training loss NaN on the given (1-based) updates."""
    original, count = update.token_cross_entropy, [0]

    def loss(*args):
        count[0] += 1
        value = original(*args)
        return value * float("nan") if count[0] in calls else value

    monkeypatch.setattr(update, "token_cross_entropy", loss)


def test_a_non_finite_update_is_skipped_and_counted(toy, tmp_path, monkeypatch):
    nan_on_calls(monkeypatch, {3})
    assert train(toy, tmp_path / "r", "train.max_steps=5", "train.device=cpu") == 0
    log = (tmp_path / "r/train.log").read_text()
    assert "step 3: loss nan" in log and "update skipped (1 so far, 1 in a row)" in log
    progress = checkpoint(tmp_path / "r")["progress"]
    assert progress["skipped_updates"] == 1 and progress["step"] == 5
    assert all(torch.isfinite(t).all() for t in checkpoint(tmp_path / "r")["model"].values())


def test_too_many_non_finite_updates_in_a_row_stop_with_one_line(
    toy, tmp_path, monkeypatch, capsys
):
    nan_on_calls(monkeypatch, set(range(5, 100)))
    capsys.readouterr()
    settings = ("train.max_steps=50", "train.max_skipped_updates=3", "train.device=cpu")
    assert train(toy, tmp_path / "r", *settings) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]  # after the training log: one error line
    assert last.startswith("seq2seq: error: 3 updates in a row had a non-finite loss")
    assert "lower train.optimizer.lr" in last
    # Validated at steps 4 and 6; steps 5 and 6 were skipped, so both hold the same model.
    last, before = checkpoint(tmp_path / "r"), checkpoint(tmp_path / "r", "previous")
    assert (last["progress"]["step"], before["progress"]["step"]) == (6, 4)
    assert all(torch.equal(last["model"][k], before["model"][k]) for k in last["model"])


def test_running_out_of_memory_while_training_is_one_line_and_keeps_the_checkpoint(
    toy, tmp_path, monkeypatch, capsys
):
    error = RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8GB")
    original, count = update.token_cross_entropy, [0]

    def loss(*args):
        count[0] += 1
        if count[0] == 7:
            raise error
        return original(*args)

    monkeypatch.setattr(update, "token_cross_entropy", loss)
    capsys.readouterr()
    assert (
        train(toy, tmp_path / "r", "train.max_steps=50", "train.valid_every=3", "train.device=cpu")
        == 1
    )
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith("seq2seq: error: out of memory at step 6")
    assert "train.batch_tokens=200" in last and "last.pt is kept" in last
    assert checkpoint(tmp_path / "r")["progress"]["step"] == 6


def blow_up_on_update(monkeypatch, update: int) -> None:
    """Make the optimizer's step number `update` leave a parameter infinite."""
    original = torch.optim.Adam.step

    def step(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if self.state_dict()["state"][0]["step"] == update:
            with torch.no_grad():
                self.param_groups[0]["params"][0].fill_(float("inf"))
        return result

    monkeypatch.setattr(torch.optim.Adam, "step", step)


def test_an_update_that_makes_parameters_non_finite_stops_with_one_line(
    toy, tmp_path, monkeypatch, capsys
):
    blow_up_on_update(monkeypatch, 3)
    assert (
        train(toy, tmp_path / "r", "train.max_steps=20", "train.valid_every=2", "train.device=cpu")
        == 2
    )
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert "the update at step 3 made the model's parameters non-finite" in line
    assert "the last good checkpoint is kept in" in line and "lower train.optimizer.lr" in line
    assert checkpoint(tmp_path / "r")["progress"]["step"] == 2


def test_stopping_before_any_checkpoint_says_none_was_written(toy, tmp_path, monkeypatch, capsys):
    nan_on_calls(monkeypatch, set(range(1, 100)))
    capsys.readouterr()
    settings = ("train.max_skipped_updates=2", "train.valid_every=50", "train.device=cpu")
    assert train(toy, tmp_path / "r", *settings) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "no checkpoint was written yet" in line and "kept in" not in line


def test_a_full_disk_is_one_line_leaves_no_temporary_and_resumes(
    toy, tmp_path, monkeypatch, capsys
):
    run = tmp_path / "r"
    calls, original = [0], files.os.fsync

    def fsync(fd):
        calls[0] += 1
        if calls[0] == 8:  # a checkpoint write during training
            raise OSError(errno.ENOSPC, "No space left on device")
        original(fd)

    monkeypatch.setattr(files.os, "fsync", fsync)
    assert train(toy, run, "train.max_steps=4") == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("seq2seq: error: cannot write ") and "No space left" in line
    assert "run the same command again" in line
    assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")]
    monkeypatch.setattr(files.os, "fsync", original)
    assert train(toy, run, "train.max_steps=4") == 0


def test_a_read_only_run_directory_is_one_line(six_steps, tmp_path, monkeypatch, capsys):
    run = tmp_path / "r"
    shutil.copytree(six_steps, run)  # a copy: the failing write must not touch the shared run

    def read_only(*args):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(files.os, "replace", read_only)
    capsys.readouterr()
    assert run_cli("average", "--run", run, "--last", "1") == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("seq2seq: error: cannot write ") and "Read-only file system" in line
    assert "\n" not in line


def signal_on_step(monkeypatch, step: int, signals: list[int]) -> None:
    """Send this process `signals` during update `step`."""
    original = Trainer.train_step

    def train_step(self, indices):
        if self.progress.step + 1 == step:
            for number in signals:
                os.kill(os.getpid(), number)
        return original(self, indices)

    monkeypatch.setattr(Trainer, "train_step", train_step)


def test_a_second_signal_stops_at_once_with_one_line(toy, tmp_path, monkeypatch, capsys):
    signal_on_step(monkeypatch, 3, [signal.SIGINT, signal.SIGINT])
    assert train(toy, tmp_path / "r", "train.max_steps=10") == 128 + signal.SIGINT
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == (
        "seq2seq: stopped at once by a second SIGINT; "
        "resume from the last saved checkpoint with the same command"
    )


def test_a_signal_during_the_test_decode_stops_it_with_one_line(toy, tmp_path, monkeypatch, capsys):
    original = testing_module.score_test_sets

    def score(*args):
        os.kill(os.getpid(), signal.SIGTERM)
        return original(*args)

    monkeypatch.setattr(testing_module, "score_test_sets", score)
    assert train(toy, tmp_path / "r", "train.max_steps=2") == 128 + signal.SIGTERM
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("seq2seq: stopped by SIGTERM during the test decode")
    assert "run the same command again to score the test sets" in line
    monkeypatch.setattr(testing_module, "score_test_sets", original)
    assert train(toy, tmp_path / "r", "train.max_steps=2") == 0
    assert (tmp_path / "r/test/scores.json").is_file()


def test_a_leftover_tokenizer_of_other_settings_is_replaced(toy, six_steps, tmp_path):
    second = tmp_path / "second"
    second.mkdir()
    shutil.copytree(six_steps / "tokenizer", second / "tokenizer")  # as a crashed start leaves it
    assert train(toy, second, "train.max_steps=1", "tokenizer.vocab_size=100") == 0
    log = (second / "train.log").read_text()
    assert "was made with other settings" in log
    settings = json.loads((second / "tokenizer/tokenizer.json").read_text())
    assert settings["vocab_size"] == 100


def test_resuming_on_a_changed_corpus_warns(toy, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(toy / "data", data)
    budget = [f"data.train={data}/train", "train.valid_every=2"]
    assert train(toy, tmp_path / "r", *budget, "train.max_steps=2") == 0
    lines = (data / "train.tgt").read_text().splitlines()
    (data / "train.tgt").write_text("\n".join([*lines[:-1], "Coha"]) + "\n")
    assert train(toy, tmp_path / "r", *budget, "train.max_steps=4") == 0
    assert "changed since this run started" in (tmp_path / "r/train.log").read_text()


def test_translate_with_stdin_closed_is_one_line(six_steps, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", None)  # what Python sets when fd 0 is closed (<&-)
    capsys.readouterr()
    assert run_cli("translate", "--run", six_steps) == 2
    assert capsys.readouterr().err.strip() == (
        "seq2seq: error: stdin is closed: nothing to translate; pass --input FILE or pipe text in"
    )


def test_bf16_on_a_cpu_without_it_is_one_line(toy, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(device, "cpu_has_bf16", lambda: False)
    assert train(toy, tmp_path / "r", "train.precision=bf16", "train.device=cpu") == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "train.precision is bf16 but this CPU has no native bf16" in line
    assert not (tmp_path / "r").exists()
