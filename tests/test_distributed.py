"""Data-parallel training under torchrun (gloo, 2 CPU processes; nccl, 2 GPUs where there are
2) matches one process."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_helpers import train

# No dropout, so that both worlds draw nothing at random; the global batch is the same
# (each rank trains on half of every batch), so only the order of float sums differs. A
# validation, and so a checkpoint to resume from, every 2 updates.
SAME_MATH = ["model.dropout=0.0", "train.valid_every=2", "train.threads=1"]


def torchrun_command(
    toy: Path, run_dir: Path, *overrides: str, agent: tuple[str, ...] = ()
) -> list[str]:
    """`seq2seq train` on 2 processes; `agent`: options of torchrun's own."""
    sets = [x for o in overrides for x in ("--set", o)]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            *agent, "-m", "seq2seq", "train", "--config", str(toy / "run.yaml"),
            "--run-dir", str(run_dir), *sets]  # fmt: skip


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def torchrun(toy: Path, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    command = torchrun_command(toy, run_dir, *overrides)
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=ENV)


def final(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints/last.pt", weights_only=True)


# gloo on 2 CPU processes everywhere; nccl with one GPU per process where 2 are visible.
TWO_GPUS = pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="DDP on GPUs needs 2 visible GPUs, one per process"
)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=TWO_GPUS)])
def test_two_processes_match_one_through_a_lost_worker_and_a_resume(toy, tmp_path, device):
    """One Transformer run holds what DDP must get right (each torchrun costs some 15 CPU
    seconds of imports): updates of three batches each (the ranks exchange gradients once
    an update, after its last batch, or they would drift apart from one process); a guided
    alignment term, summed over the ranks with the loss; layers that recompute their
    activations (the same gradients); a worker killed midway, which torchrun reports while
    the survivor says one line, no traceback; and the run launched again, which resumes
    from its last checkpoint to the weights of one process."""
    model = ["model.arch=transformer", "model.ff_dim=32", f"train.device={device}"]
    model += ["train.accumulate=3", "data.alignments=true", "train.alignment_weight=1"]
    double_only = ["train.checkpoint_activations=true"]
    single, double = tmp_path / "single", tmp_path / "double"
    assert train(toy, single, *SAME_MATH, *model, "train.max_steps=8") == 0

    # The agent looks late, so that the survivor meets the loss at its next collective
    # before the agent would stop it with SIGTERM.
    endless = [*SAME_MATH, *model, *double_only, "train.max_steps=100000"]
    command = torchrun_command(toy, double, *endless, agent=("--monitor-interval=3",))
    agent = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=ENV)
    deadline = time.time() + 120
    while not (double / "checkpoints/last.pt").is_file():  # saved at step 2 (or 4)
        assert time.time() < deadline and agent.poll() is None, "no checkpoint"
        time.sleep(0.05)
    os.kill(worker(agent.pid, rank=1), signal.SIGKILL)
    _, err = agent.communicate(timeout=120)
    assert "seq2seq: error: process 0 of 2 lost contact with the others" in err, err
    assert "seq2seq/train/" not in err, err  # no traceback through the trainer

    done = torchrun(toy, double, *SAME_MATH, *model, *double_only, "train.max_steps=8")
    assert done.returncode == 0, done.stderr[-6000:]
    log = (double / "train.log").read_text()
    assert "2 process(es)" in log and "resumed" in log
    assert "rank 1" not in log  # only rank 0 writes the log
    # The guided term logged is the whole world's, as one process's (by step: the steps
    # the killed run took past its checkpoint are logged twice).
    single_terms, double_terms = (alignment_terms(run / "train.log") for run in (single, double))
    assert len(single_terms) == 8 and single_terms == pytest.approx(double_terms, rel=1e-3)

    one, two = final(single), final(double)
    assert one["progress"]["step"] == two["progress"]["step"] == 8
    assert len(two["rng"]) == 2  # every rank's generators, for an exact resume
    for name, tensor in one["model"].items():
        # Float sums in another order, through 8 Adam updates: agreement to ~1e-6. Past the
        # first update, Adam's steps depend on the gradients' sizes, not only their signs.
        torch.testing.assert_close(two["model"][name], tensor, rtol=1e-4, atol=1e-5)


def alignment_terms(log: Path) -> dict[int, float]:
    """The guided alignment term a log reports at each step (its last word on a step)."""
    found = re.findall(r"step (\d+) .*alignment ([\d.]+)", log.read_text())
    return {int(step): float(term) for step, term in found}


def worker(agent: int, rank: int) -> int:
    """The pid of the worker of `rank` that torchrun's agent process started."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rpartition(")")[2].split()[1])
            environ = (stat.parent / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue  # a process that ended meanwhile
        if parent == agent and f"RANK={rank}".encode() in environ:
            return int(stat.parent.name)
    raise AssertionError(f"no worker of rank {rank}")
