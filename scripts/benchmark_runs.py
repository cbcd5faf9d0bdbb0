"""What the scripts that train the runs they measure share (multilingual_benchmark.py,
distillation_benchmark.py, lora_benchmark.py): `seq2seq` in a child process, `--set`
lines, whether a run finished, its test BLEU, a table cell of seeds, and the command line
`train [--only NAME ...] [--jobs N]` | `table`."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def seq2seq(*args: str, log: Path | None = None) -> None:
    """`python -m seq2seq ARGS`, its output in `log` (appended) when one is given."""
    command = [sys.executable, "-m", "seq2seq", *args]
    if log is None:
        subprocess.run(command, check=True)
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        subprocess.run(command, check=True, stdout=out, stderr=subprocess.STDOUT)


def sets(*assignments: str) -> list[str]:
    """`--set` before each assignment."""
    return [word for assignment in assignments for word in ("--set", assignment)]


def finished(run: Path) -> bool:
    return (run / "test/scores.json").is_file()


def bleu(run: Path, test: str) -> float | None:
    """The run's test BLEU on `test`; None before it finished."""
    return (
        json.loads((run / "test/scores.json").read_text())[test]["bleu"] if finished(run) else None
    )


def cell(values: list[float | None]) -> str:
    """The mean of the seeds' BLEU and each seed's, or how many are missing."""
    found = [v for v in values if v is not None]
    if len(found) < len(values):
        return f"({len(found)} of {len(values)} seeds)"
    return f"{statistics.fmean(found):.2f} ({' / '.join(f'{v:.2f}' for v in found)})"


def main(
    doc: str,
    train_runs: Callable[..., None],
    table: Callable[[], str],
    parallel: bool = False,
) -> None:
    """`train [--only NAME ...]`: the runs missing (`train_runs(only)`, or with `parallel`
    `train_runs(only, jobs)` and a `--jobs N` option); `table`: `table()`."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train the missing runs (resumable)")
    train.add_argument("--only", nargs="*", default=[], help="these runs alone, by name")
    if parallel:
        train.add_argument(
            "--jobs", type=int, default=1, help="runs at once (a GPU machine: several)"
        )
    commands.add_parser("table", help="print the table (BLEU: the mean of the seeds, each seed)")
    args = parser.parse_args()
    if parallel and args.command == "train" and args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: give 1 or more runs at once")
    if args.command == "train":
        train_runs(args.only, *([args.jobs] if parallel else []))
    else:
        print(table())
