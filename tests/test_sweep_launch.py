"""`seq2seq sweep --launcher local|slurm`: the runs as submitit jobs. Slurm is tested by
building its job array with the submission itself stubbed (no Slurm here): the sbatch file
and the pickled jobs, one of which is then run as a Slurm node would run it."""

from __future__ import annotations

import shutil
import sys

import pytest
from cli_helpers import run_cli
from sweep_helpers import FAST, assert_same_runs, hand_made_run, write_sweep

from seq2seq.checkpoint import RunDir, training_lock
from seq2seq.config import load_config
from seq2seq.sweep import load_sweep

submitit = pytest.importorskip("submitit", reason="the slurm extra: pip install -e '.[slurm]'")


def test_launcher_local_trains_the_runs_as_submitit_jobs(
    sequential, tmp_path, monkeypatch, undrawn_charts
):
    path, alone = sequential
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "local"
    # One shard of the two runs: a job is a process, and each costs seconds of imports.
    local = ["--sweep-dir", root, "--launcher", "local", "--shard", "2/2"]
    assert run_cli("sweep", "--config", path, *local) == 0
    assert_same_runs(alone, root, count=1)
    listed = (root / "jobs/submitted.txt").read_text().splitlines()
    assert len(listed) == 1 and "_log.out" in listed[0]
    assert (root / "report/results.md").is_file()


@pytest.fixture
def fake_sbatch(monkeypatch):
    """sbatch answers as Slurm does, and submits nothing; srun is 'there'."""
    slurm = submitit.SlurmExecutor
    monkeypatch.setattr(slurm, "affinity", classmethod(lambda cls: 2))
    answer = ["echo", "Submitted batch job 4242"]
    monkeypatch.setattr(slurm, "_make_submission_command", lambda self, path: answer)


SLURM = ["--launcher", "slurm", "--slurm", "partition=gpu", "--slurm", "time=90"]
SLURM += ["--slurm", "gpus_per_node=1", "--slurm", "mem=16GB", "--slurm", "array_parallelism=1"]


def test_launcher_slurm_submits_a_job_array_of_what_is_left(
    toy, tmp_path, monkeypatch, capsys, fake_sbatch
):
    """4 runs, one finished and one being trained: a job array of the other two, each job
    a run; the same command again submits only what is still not finished."""
    monkeypatch.chdir(tmp_path)
    path = write_sweep(
        tmp_path,
        base_config=load_config(toy / "run.yaml").to_dict(),
        grid={"model.attention.type": ["bahdanau", "dot"]},
        set=FAST,
    )
    sweep, root = load_sweep(path), tmp_path / "runs/sweeps/s"
    scores = {"bleu": 1.0, "chrf": 1.0, "ter": 1.0}
    hand_made_run(root, sweep.runs[0], scores, ["a b"] * 10, [(4, 1.0)])
    busy = RunDir(root / "runs" / sweep.runs[1].name)
    with training_lock(busy):
        assert run_cli("sweep", "--config", path, *SLURM) == 0
    out, err = capsys.readouterr()
    assert f"{sweep.runs[1].name}: being trained by process" in err
    assert "as Slurm job array 4242" in out and "_log.out" in out
    (sbatch,) = (root / "jobs").glob("*/*submission.sh")
    text = sbatch.read_text()
    for line in (
        "--array=0-1%1",
        "--partition=gpu",
        "--time=90",
        "--gpus-per-node=1",
        "--mem=16GB",
    ):
        assert f"#SBATCH {line}\n" in text, line
    jobs = sorted((root / "jobs").glob("4242_*/*_submitted.pkl"))
    delayed = [submitit.core.utils.DelayedSubmission.load(p) for p in jobs]
    assert [d.args[1] for d in delayed] == [run.name for run in sweep.runs[2:]]
    delayed[0].result()  # as the Slurm node runs it
    assert (root / "runs" / sweep.runs[2].name / "test/scores.json").is_file()

    assert run_cli("sweep", "--config", path, *SLURM) == 0  # the lock is free now
    out, _ = capsys.readouterr()
    assert "submitted 2 run(s)" in out and sweep.runs[2].name not in out


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["--slurm", "colour=blue"],
            "--slurm: submitit refuses Unavailable parameter(s): ['colour']",
        ),
        (["--slurm", "partition"], "--slurm 'partition': expected KEY=VALUE"),
    ],
)
def test_bad_slurm_settings_are_one_line_and_write_nothing(
    toy, tmp_path, monkeypatch, capsys, fake_sbatch, args, expected
):
    monkeypatch.chdir(tmp_path)
    path = write_sweep(tmp_path, base_config=load_config(toy / "run.yaml").to_dict(), set=FAST)
    assert run_cli("sweep", "--config", path, "--launcher", "slurm", *args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err
    assert not (tmp_path / "runs/sweeps/s/sweep.yaml").exists()


def test_without_srun_or_submitit_the_launcher_says_what_to_do(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write_sweep(tmp_path)
    if shutil.which("srun") is None:
        assert run_cli("sweep", "--config", path, "--launcher", "slurm") == 2
        assert "--launcher local" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "submitit", None)  # as if not installed
    assert run_cli("sweep", "--config", path, "--launcher", "local") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'seq2seq[slurm]'" in err
