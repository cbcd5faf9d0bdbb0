"""Data-parallel training under torchrun (gloo, 2 CPU processes) matches one process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import train

# No dropout, so that both worlds draw nothing at random; the global batch is the same
# (each rank trains on half of every batch), so only the order of float sums differs.
SAME_MATH = ["model.dropout=0.0", "train.valid_every=100", "train.threads=1"]


def torchrun(toy: Path, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    sets = [x for o in overrides for x in ("--set", o)]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", "-m", "seq2seq", "train", "--config", str(toy / "run.yaml"),
               "--run-dir", str(run_dir), *sets]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


def final(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints/last.pt", weights_only=True)


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_two_processes_match_one_and_resume_under_ddp(toy, tmp_path, arch):
    model = [f"model.arch={arch}", "model.ff_dim=32"] if arch == "transformer" else []
    single, double = tmp_path / "single", tmp_path / "double"
    assert train(toy, single, *SAME_MATH, *model, "train.max_steps=4") == 0

    # The Transformer stops halfway and resumes; the RNN trains straight through.
    budgets = (
        ["train.max_steps=2", "train.max_steps=4"]
        if arch == "transformer"
        else ["train.max_steps=4"]
    )
    for budget in budgets:
        done = torchrun(toy, double, *SAME_MATH, *model, budget)
        assert done.returncode == 0, done.stderr[-6000:]
    log = (double / "train.log").read_text()
    assert "2 process(es)" in log and ("resumed" in log) == (len(budgets) == 2)
    assert "rank 1" not in log  # only rank 0 writes the log

    one, two = final(single), final(double)
    assert one["progress"]["step"] == two["progress"]["step"] == 4
    assert len(two["rng"]) == 2  # every rank's generators, for an exact resume
    for name, tensor in one["model"].items():
        # Float sums in another order, through 4 Adam updates: agreement to ~1e-6. Past the
        # first update, Adam's steps depend on the gradients' sizes, not only their signs.
        torch.testing.assert_close(two["model"][name], tensor, rtol=1e-4, atol=1e-5)
