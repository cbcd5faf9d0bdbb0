"""Training side by side: do the default threads collapse when runs share the cores?

    python scripts/bench_busy.py [--config configs/demo.yaml] [--steps 300] [--runs 2] \\
        [--set KEY=VALUE ...]

Runs `seq2seq train` (the command a user runs, in fresh processes) on the toy task:
first one run with one thread, alone, then --runs runs at once with the default threads,
and prints one JSON line: each run's training seconds (summary.json's train_seconds: the
updates and their validations, without start-up), its ratio to the lone one-thread run,
the threads it used and the load average before and after. Where the defaults serve a
busy machine, every ratio stays near --runs / cores (1 on 2 cores with 2 runs); before
the passive wait policy it was 5-35x. On a machine that other jobs load, compare ratios
taken back to back, several times.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from seq2seq.data.toy import make_toy_corpus  # noqa: E402


def train_command(args: argparse.Namespace, data: Path, run_dir: Path, *extra: str) -> list[str]:
    """`seq2seq train` of --steps updates on the toy corpus in `data`, scoring no test set."""
    overrides = [
        f"data.train={data}/train", f"data.valid={data}/valid", "data.test=[]",
        f"train.max_steps={args.steps}", "train.max_epochs=1000", "train.max_time=null",
        *args.set, *extra,
    ]  # fmt: skip
    command = [sys.executable, "-m", "seq2seq", "train", "--config", str(args.config)]
    command += ["--run-dir", str(run_dir)]
    for override in overrides:
        command += ["--set", override]
    return command


def run_together(commands: list[list[str]]) -> None:
    """Start every command at once and wait for all; any failure ends the benchmark."""
    env = os.environ | {"PYTHONPATH": os.environ.get("PYTHONPATH") or str(ROOT)}
    processes = [
        subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for c in commands
    ]
    try:
        for process, command in zip(processes, commands, strict=True):
            _, log = process.communicate()
            if process.returncode != 0:
                sys.exit(f"{log}failed ({process.returncode}): {' '.join(command)}")
    finally:  # stopped (Ctrl-C, a timeout's SIGTERM) or failed: leave no run behind
        for process in processes:
            process.kill()


def train_seconds(run_dir: Path) -> float:
    return json.loads((run_dir / "summary.json").read_text())["train_seconds"]


def threads_used(run_dir: Path) -> int | None:
    """The CPU threads the run's log names (None: it names none, as older versions)."""
    found = re.search(r"(\d+) CPU threads", (run_dir / "train.log").read_text())
    return int(found.group(1)) if found else None


def one_round(args: argparse.Namespace, data: Path, tmp: Path) -> dict:
    """A lone one-thread run, then --runs runs side by side with the defaults."""
    load_before = os.getloadavg()[0]
    lone = tmp / "lone"
    run_together([train_command(args, data, lone, "train.threads=1")])
    runs = [tmp / f"side{i}" for i in range(args.runs)]
    run_together([train_command(args, data, run) for run in runs])
    reference, seconds = train_seconds(lone), [train_seconds(run) for run in runs]
    return {
        "config": str(args.config),
        "steps": args.steps,
        "cpus": len(os.sched_getaffinity(0)),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "lone_one_thread_s": reference,
        "side_by_side_s": seconds,
        "side_by_side_threads": [threads_used(run) for run in runs],
        "ratios": [round(s / reference, 2) for s in seconds],
        "wait_policy": os.environ.get("OMP_WAIT_POLICY"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs/demo.yaml")
    parser.add_argument("--steps", type=int, default=300, help="updates per run")
    parser.add_argument("--runs", type=int, default=2, help="runs side by side")
    parser.add_argument("--rounds", type=int, default=1, help="repeat, a JSON line each")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "toy"
        make_toy_corpus(data, seed=1, train=20000, valid=100, test=1, max_words=16)
        for number in range(args.rounds):
            print(json.dumps(one_round(args, data, Path(tmp) / str(number))), flush=True)


if __name__ == "__main__":
    main()
