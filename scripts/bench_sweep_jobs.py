"""Wall time of a sweep trained one run at a time and N runs at once (`seq2seq sweep
--jobs N`), and whether the runs come out the same bit for bit (docs/benchmarks.md).

    python scripts/bench_sweep_jobs.py configs/sweeps/demo.yaml runs/bench-jobs/demo
    python scripts/bench_sweep_jobs.py configs/sweeps/attention_rnn_slice9.yaml runs/bench-study

Each sweep trains from scratch into OUT/jobs-N (N = 1: no --jobs, the sweep's own process).
The runs' configs fix train.threads (both files: 1), so the weights must be identical.
Run it on a quiet machine: the figures are wall times."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import torch


def train(sweep: Path, out: Path, jobs: int) -> float:
    """Seconds to train the sweep into `out` from scratch."""
    if out.exists():
        sys.exit(f"{out} exists; pass a new OUT (the sweep would skip its finished runs)")
    command = [sys.executable, "-m", "seq2seq", "sweep", "--config", str(sweep)]
    command += ["--sweep-dir", str(out), *(["--jobs", str(jobs)] if jobs > 1 else [])]
    start = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def identical(first: Path, second: Path) -> bool:
    """Whether every run's last and best checkpoints hold the same weights in both."""
    for run in sorted((first / "runs").iterdir()):
        for name in ("last.pt", "best.pt"):
            a, b = (
                torch.load(d / "runs" / run.name / "checkpoints" / name, weights_only=True)
                for d in (first, second)
            )
            if a["model"].keys() != b["model"].keys():
                return False
            if not all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"]):
                return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    seconds = {jobs: train(args.sweep, args.out / f"jobs-{jobs}", jobs) for jobs in args.jobs}
    runs = len(list((args.out / f"jobs-{args.jobs[0]}" / "runs").iterdir()))
    print(f"{args.sweep}: {runs} runs")
    print("| --jobs | wall time | runs per hour | weights as --jobs 1 |\n|---:|---:|---:|---|")
    for jobs, wall in seconds.items():
        same = identical(args.out / "jobs-1", args.out / f"jobs-{jobs}") if 1 in seconds else None
        print(f"| {jobs} | {wall:.0f} s | {runs * 3600 / wall:.1f} | {same} |")


if __name__ == "__main__":
    main()
