"""Training survives kills, stop signals, corrupt checkpoints and non-finite updates."""

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from cli_helpers import train

from seq2seq.train import trainer


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


def wait_for_step(process: subprocess.Popen, run_dir: Path, step: int, after: int = 0) -> None:
    """Until the log (past its first `after` characters) reports update `step`."""
    log, deadline = run_dir / "train.log", time.time() + 120
    while not (log.is_file() and f"step {step} " in log.read_text()[after:]):
        assert time.time() < deadline and process.poll() is None, f"no step {step}"
        time.sleep(0.01)


def test_sigkill_at_random_steps_then_resuming_equals_an_uninterrupted_run(toy, tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    budget = ["train.max_steps=30", "train.valid_every=3"]  # a resume checkpoint every 3
    assert train(toy, straight, *budget) == 0

    picker = random.Random()  # its own generator: training in this process seeds `random`
    first = picker.randrange(2, 14)
    second = picker.randrange(first + 3, 27)
    print(f"killed after steps {first} and {second}")  # to reproduce a failure
    for step in (first, second):
        log = killed / "train.log"
        before = len(log.read_text()) if log.is_file() else 0
        process = start_training(toy, killed, *budget)
        wait_for_step(process, killed, step, after=before)
        process.kill()
        process.wait(timeout=60)
        assert process.returncode == -signal.SIGKILL

    assert train(toy, killed, *budget) == 0
    assert same_parameters(straight, killed)
    moments, resumed = (
        checkpoint(straight)["optimizer"]["state"],
        checkpoint(killed)["optimizer"]["state"],
    )
    assert all(torch.equal(moments[p][n], resumed[p][n]) for p in moments for n in moments[p])


def test_sigterm_saves_a_checkpoint_that_resumes_exactly(toy, tmp_path):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    budget = ["train.max_steps=40", "train.valid_every=100"]
    assert train(toy, straight, *budget) == 0

    process = start_training(toy, stopped, "train.max_steps=100000", "train.valid_every=100")
    wait_for_step(process, stopped, 3)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    message = err.decode().strip().splitlines()[-1]
    assert "stopped by SIGTERM" in message and "resume with the same command" in message
    step = checkpoint(stopped)["progress"]["step"]
    assert 3 <= step < 40, step

    assert train(toy, stopped, *budget) == 0
    assert same_parameters(straight, stopped)


def test_a_truncated_checkpoint_falls_back_to_the_one_before(toy, tmp_path):
    straight, damaged = tmp_path / "straight", tmp_path / "damaged"
    assert train(toy, straight, "train.max_steps=8") == 0
    assert train(toy, damaged, "train.max_steps=6") == 0  # validations at 2, 4, 6
    assert checkpoint(damaged, "previous")["progress"]["step"] == 4
    last = damaged / "checkpoints/last.pt"
    last.write_bytes(last.read_bytes()[:1000])

    assert train(toy, damaged, "train.max_steps=8") == 0
    log = (damaged / "train.log").read_text()
    assert "last.pt is corrupt or truncated" in log and "previous.pt (step 4)" in log
    assert same_parameters(straight, damaged)


def nan_on_calls(monkeypatch, calls: set[int]) -> None:
    """Make the training loss NaN on the given (1-based) updates."""
    original, count = trainer.token_cross_entropy, [0]

    def loss(*args):
        count[0] += 1
        value = original(*args)
        return value * float("nan") if count[0] in calls else value

    monkeypatch.setattr(trainer, "token_cross_entropy", loss)


def test_a_non_finite_update_is_skipped_and_counted(toy, tmp_path, monkeypatch):
    nan_on_calls(monkeypatch, {3})
    assert train(toy, tmp_path / "r", "train.max_steps=5") == 0
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
    assert train(toy, tmp_path / "r", "train.max_steps=50", "train.max_skipped_updates=3") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]  # after the training log: one error line
    assert last.startswith("seq2seq: error: 3 updates in a row had a non-finite loss")
    assert "lower train.optimizer.lr" in last
    # Validated at steps 4 and 6; steps 5 and 6 were skipped, so both hold the same model.
    last, before = checkpoint(tmp_path / "r"), checkpoint(tmp_path / "r", "previous")
    assert (last["progress"]["step"], before["progress"]["step"]) == (6, 4)
    assert all(torch.equal(last["model"][k], before["model"][k]) for k in last["model"])
