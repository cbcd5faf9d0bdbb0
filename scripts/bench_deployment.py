"""A teacher and its students in one table: the size of each, its test BLEU and chrF (from
its run's test/scores.json), and its CPU decoding (`scripts/bench.py decode` of the
checkpoint its tests translated: greedy and beam 5, float32 and int8 weights, and int8 with
the vocabulary shortlist, 2 threads by default): sentences/s, also as a multiple of the
first run's (the teacher's) at beam 5 in float32, and the BLEU of that decoding against
--ref. The shortlist is built from each run's training pairs the first time (shortlist.pt
in the run), before the timing.

    python scripts/bench_deployment.py --run runs/teacher runs/student-kd [...] \\
        --input data/multi30k/test_2016_flickr.de.gz --ref data/multi30k/test_2016_flickr.en.gz \\
        [--threads 2] [--limit N] [--rounds N]

Markdown on stdout; every measurement's JSON line (bench.py's) on stderr as it comes. Run it
from the repository root on an otherwise idle machine: speeds compare only within one
sitting (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

BENCH = Path(__file__).with_name("bench.py")
BEAMS = (1, 5)
# each column group's name -> the bench.py decode options that measure it
DECODINGS = {
    "float32": ["--engine", "torch", "--no-shortlist"],
    "int8": ["--engine", "torch-int8", "--no-shortlist"],
    "int8, shortlist": ["--engine", "torch-int8", "--shortlist"],
}
SETTINGS = [(decoding, beam) for decoding in DECODINGS for beam in BEAMS]  # the columns


def speeds(run: Path, args: argparse.Namespace) -> dict[tuple[str, int], tuple[float, float]]:
    """(decoding, beam) -> (sentences/s, BLEU) of `run`'s tested checkpoint, measured by
    bench.py decode."""
    command = [sys.executable, str(BENCH), "decode", "--run", str(run), "--input", str(args.input)]
    command += ["--checkpoint", tested_checkpoint(run), "--ref", str(args.ref)]
    command += ["--beam", *map(str, BEAMS), "--threads", str(args.threads)]
    command += ["--limit", str(args.limit)] if args.limit else []
    found = {}
    for decoding, options in DECODINGS.items():
        done = subprocess.run(command + options, check=True, capture_output=True, text=True)
        for line in done.stdout.splitlines():
            print(line, file=sys.stderr, flush=True)
            measured = json.loads(line)
            found[decoding, measured["beam"]] = measured["sentences_per_s"], measured["bleu"]
    return found


def tested_checkpoint(run: Path) -> str:
    """The checkpoint whose translations test/scores.json scores (train.test_checkpoint)."""
    return yaml.safe_load((run / "config.yaml").read_text())["train"]["test_checkpoint"]


def scores(run: Path) -> dict[str, dict[str, float]]:
    """Test set -> its scores, as the run's test decode wrote them."""
    return json.loads((run / "test/scores.json").read_text())


def untestable(runs: list[Path]) -> str | None:
    """Why the runs cannot share one table (a run not finished, or not tested on the
    teacher's test sets), or None."""
    for run in runs:
        try:
            parameters(run)
            for metrics in scores(run).values():
                metrics["bleu"], metrics["chrf"]  # noqa: B018 - read to be there
            checkpoint = tested_checkpoint(run)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError):
            return (
                f"{run}: no readable test/scores.json (BLEU and chrF per test set), "
                "summary.json (parameters) and config.yaml: give runs trained to their end"
            )
        if checkpoint not in ("best", "last"):
            return f"{run}: tested on the {checkpoint} of checkpoints, not one checkpoint to time"
    teacher = set(scores(runs[0]))
    for run in runs[1:]:
        if missing := sorted(teacher - set(scores(run))):
            return f"{run}: not tested on {', '.join(missing)}, as the teacher ({runs[0]}) was"
    return None


def parameters(run: Path) -> int:
    return json.loads((run / "summary.json").read_text())["parameters"]


def median_speeds(runs: list[Path], args: argparse.Namespace) -> list[dict]:
    """Each run's `speeds`, the sentences/s the median of `args.rounds` passes (the BLEU is
    the same in each). A round times every run in turn, so that the machine's drift over
    the sitting touches each alike."""
    rounds = [[speeds(run, args) for run in runs] for _ in range(args.rounds)]
    return [
        {
            setting: (statistics.median(p[setting][0] for p in passes), passes[0][setting][1])
            for setting in SETTINGS
        }
        for passes in zip(*rounds, strict=True)
    ]


def table(runs: list[Path], args: argparse.Namespace) -> str:
    tests = list(scores(runs[0]))
    columns = [f"{decoding}, beam {beam}: sent/s, BLEU" for decoding, beam in SETTINGS]
    head = ["run", "parameters", *(f"{test} BLEU / chrF" for test in tests), *columns]
    rows = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    every = median_speeds(runs, args)
    reference = every[0]["float32", 5][0]
    for run, measured in zip(runs, every, strict=True):
        found = scores(run)
        quality = [f"{found[t]['bleu']:.2f} / {found[t]['chrf']:.2f}" for t in tests]
        timed = (measured[setting] for setting in SETTINGS)
        fast = [f"{speed:.1f} ({speed / reference:.1f}x), {bleu:.2f}" for speed, bleu in timed]
        rows.append(f"| {run.name} | {parameters(run):,} | " + " | ".join(quality + fast) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, nargs="+", required=True, help="the teacher first")
    parser.add_argument("--input", type=Path, required=True, help="the source lines timed")
    parser.add_argument("--ref", type=Path, required=True, help="their references (for BLEU)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, help="only the first N lines")
    parser.add_argument("--rounds", type=int, default=1, help="passes each (the median)")
    args = parser.parse_args()
    if args.rounds < 1:
        raise SystemExit(f"--rounds {args.rounds}: give 1 or more passes")
    if problem := untestable(args.run):
        raise SystemExit(problem)
    print(table(args.run, args))


if __name__ == "__main__":
    main()
