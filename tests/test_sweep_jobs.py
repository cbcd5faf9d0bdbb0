"""`seq2seq sweep --jobs N`: runs trained at once in worker processes equal runs trained one
after another; a failing run does not stop the others; a stop signal stops every run,
saved; the slots share the cores and spread over GPUs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import run_cli
from sweep_helpers import FAST, assert_same_runs, write_sweep

from seq2seq.checkpoint import RunDir, training_lock
from seq2seq.config import load_config
from seq2seq.errors import UserError
from seq2seq.sweep import load_sweep
from seq2seq.sweep.running import runner
from seq2seq.sweep.running.display import time_left
from seq2seq.sweep.running.jobs import Slot, plan_slots

ROOT = Path(__file__).resolve().parent.parent


def test_runs_trained_two_at_once_equal_runs_trained_one_after_another(
    sequential, tmp_path, monkeypatch, capsys, undrawn_charts
):
    path, alone = sequential
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "two-at-once"
    assert run_cli("sweep", "--config", path, "--sweep-dir", root, "--jobs", "2") == 0
    err = capsys.readouterr().err
    assert_same_runs(alone, root)
    assert err.count("training the shared tokenizer") == 1  # once, before the runs
    assert err.count(": started (1 CPU thread(s))") == 2 and err.count("finished in") == 2
    assert "step 1 " not in err  # the runs' logs stay in their directories
    for log in root.glob("runs/*/train.log"):
        assert "step 4 " in log.read_text() and "train: 300 pairs kept" in log.read_text()
    assert (root / "report/results.md").is_file()
    # The same command again: every run is finished, none is started.
    assert run_cli("sweep", "--config", path, "--sweep-dir", root, "--jobs", "2") == 0
    err = capsys.readouterr().err
    assert err.count("finished, skipped") == 2 and "started" not in err


def test_a_failing_run_does_not_stop_the_others(toy, tmp_path, monkeypatch, capsys, undrawn_charts):
    """One run fails on its data, another is held by another process (and refused without
    a worker started for it): the third trains, and the sweep's last line names the
    failure."""
    monkeypatch.chdir(tmp_path)
    path = write_sweep(
        tmp_path,
        base_config=load_config(toy / "run.yaml").to_dict(),
        grid={"data.max_len": [1, 40, 50]},  # no training pair is 1 piece long
        seeds=[1],
        set={**FAST, "train.max_steps": 2},
    )
    runs = tmp_path / "runs/sweeps/s/runs"
    with training_lock(RunDir(runs / "data.max_len=50,seed=1")):
        assert run_cli("sweep", "--config", path, "--jobs", "2") == 2
    err = capsys.readouterr().err
    assert "data.max_len=1,seed=1 failed: no training pair is at most 1 pieces" in err
    busy = "data.max_len=50,seed=1 skipped: runs/sweeps/s/runs/data.max_len=50,seed=1 is being "
    assert f"{busy}trained by process {os.getpid()}" in err
    assert err.count(": started (") == 2
    assert "1 run(s) of sweep s failed (data.max_len=1,seed=1)" in err.splitlines()[-1]
    assert (runs / "data.max_len=40,seed=1/test/scores.json").is_file()


def test_more_jobs_than_runs_to_train_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sweep = load_sweep(write_sweep(tmp_path, grid={"model.attention.type": ["dot"]}, seeds=[1]))
    assert len(runner._slots(sweep, tmp_path / "s", None, 4, None)) == 1
    assert "--jobs 4, and 1 run(s) to train: 1 at once" in capsys.readouterr().err


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {seconds} s")
        time.sleep(0.2)


def test_a_stop_signal_stops_every_run_saved(toy, tmp_path, monkeypatch, capsys):
    """Ctrl-C (SIGINT) to the sweep stops both runs the way `seq2seq train` stops: each
    saves its last checkpoint, and the sweep ends with 130 and one line; no run is lost."""
    path = write_sweep(
        tmp_path,
        base_config=load_config(toy / "run.yaml").to_dict(),
        grid={"model.attention.type": ["dot"]},
        seeds=[1, 2, 3],
        set={**FAST, "train.max_steps": 100_000},
    )
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    sweep = [sys.executable, "-m", "seq2seq", "sweep", "--config", str(path), "--jobs", "2"]
    process = subprocess.Popen(sweep, cwd=tmp_path, env=environ, stderr=subprocess.PIPE, text=True)
    logs = [tmp_path / f"runs/sweeps/s/runs/attention.type=dot,seed={s}/train.log" for s in (1, 2)]
    try:
        training = lambda: all(p.is_file() and "step 2 " in p.read_text() for p in logs)  # noqa: E731
        wait_for(training, 120, "two runs training")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("seq2seq: sweep stopped by SIGINT: 2 run(s) saved where they stopped")
    assert "1 not started; resume with the same command" in last
    monkeypatch.chdir(tmp_path)
    assert run_cli("sweep", "--config", path, "--status") == 0
    status = capsys.readouterr().out
    assert status.count(": resuming") == 2 and status.count(": training") == 1


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--jobs", "0"], "--jobs 0: give how many runs to train at once, 1 or more"),
        (["--jobs-per-gpu", "0"], "--jobs-per-gpu 0: give how many runs"),
        (["--jobs", "2", "--launcher", "local"], "pass one of the two"),
        (["--slurm", "partition=gpu"], "pass --launcher slurm with it"),
        (["--launcher", "local", "--slurm", "time=60"], "pass --launcher slurm with it"),
    ],
)
def test_bad_job_options_are_one_line(tmp_path, capsys, args, expected):
    assert run_cli("sweep", "--config", tmp_path / "none.yaml", *args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err


def test_slots_share_the_cores_and_spread_over_the_gpus():
    assert plan_slots(2, None, [], cores=2, runs=9) == [Slot(None, 1)] * 2
    assert plan_slots(3, None, [], cores=8, runs=9) == [Slot(None, 2)] * 3
    assert plan_slots(4, None, [], cores=2, runs=2) == [Slot(None, 1)] * 2  # fewer runs
    assert [s.gpu for s in plan_slots(4, 2, ["0", "1"], cores=16, runs=9)] == ["0", "1", "0", "1"]
    assert plan_slots(None, 3, ["7"], cores=16, runs=9) == [Slot("7", 5)] * 3
    assert [s.gpu for s in plan_slots(1, None, ["0", "1"], cores=16, runs=9)] == ["0"]
    assert [s.gpu for s in plan_slots(3, None, ["0", "1"], cores=16, runs=9)] == ["0", "1", "0"]
    assert plan_slots(2, None, ["0"], cores=16, runs=9) == [Slot("0", 8)] * 2
    with pytest.raises(UserError, match="--jobs 3 is more runs at once than 2 GPU.*-per-gpu 2, or"):
        plan_slots(3, 1, ["0", "1"], cores=16, runs=9)
    with pytest.raises(UserError, match="no GPU is visible; pass --jobs N alone"):
        plan_slots(2, 2, [], cores=16, runs=9)


def test_the_time_left_comes_from_the_runs_finished():
    assert time_left([], [10.0], left=3, slots=2) is None
    # Two runs of 100 s done; one running for 40 s needs 60 more, two left need 200.
    assert time_left([90.0, 110.0], [40.0], left=2, slots=2) == pytest.approx(130.0)


def running(pid: int) -> bool:
    """Whether the process lives (an exited one no parent reaped is a zombie: not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_workers_die_with_a_killed_sweep(toy, tmp_path):
    """SIGKILL of the sweep (no chance to pass a signal on) still stops its worker: the
    kernel sends it SIGTERM (PR_SET_PDEATHSIG), and it stops as a signal stops a run; it
    does not train on as an orphan."""
    path = write_sweep(
        tmp_path,
        base_config=load_config(toy / "run.yaml").to_dict(),
        grid={"model.attention.type": ["dot"]},
        seeds=[1],
        # Quiet workers: one that wrote to the dead sweep's pipe would die of that alone.
        set={
            **FAST,
            "train.max_steps": 100_000,
            "train.max_epochs": 100_000,
            "train.log_every": 100_000,
            "train.valid_every": 100_000,
        },
    )
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    sweep = [sys.executable, "-m", "seq2seq", "sweep", "--config", str(path), "--jobs", "2"]
    process = subprocess.Popen(sweep, cwd=tmp_path, env=environ, stderr=subprocess.DEVNULL)
    run = tmp_path / "runs/sweeps/s/runs/attention.type=dot,seed=1"
    try:
        wait_for((run / "meta.json").is_file, 120, "the run training")
        time.sleep(2)
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text()
        workers = [int(pid) for pid in children.split()]
        assert len(workers) == 1
        process.kill()
        process.wait(timeout=30)
        gone = lambda: not any(running(w) for w in workers)  # noqa: E731
        wait_for(gone, 60, "end of the orphaned workers")
    finally:
        process.kill()
