"""Benchmarks that print one JSON line per measurement, so results can be compared.

    python scripts/bench.py train --config configs/multi30k_transformer.yaml [--steps 50] \
        [--warmup 10] [--threads 2] [--set train.precision=bf16 ...] [--profile ROWS] [--compile]
    python scripts/bench.py losses --config configs/study/rnn.yaml [--steps 100]
    python scripts/bench.py diagnostics --config configs/multi30k_rnn.yaml [--steps 10] \
        [--repeats 3] [--threads 2] [--set ...]
    python scripts/bench.py decode --run runs/multi30k-transformer [runs/other ...] \
        --input data/multi30k/test_2016_flickr.de.gz [--ref data/multi30k/test_2016_flickr.en.gz] \
        [--beam 1 5] [--threads 2] [--busy 2] [--device cuda] [--limit N] \
        [--length-penalty A] [--stopping beam|early|exact] \
        [--engine torch torch-int8 ct2-float32 ct2-int8]
    python scripts/bench.py data --pairs 1000000 --work /tmp/bench-data \
        [--config configs/multi30k_transformer.yaml] [--ranks 2] [--updates 20]
        [--code ../old] [--prepared]
    python scripts/bench.py compare --base ../old-checkout [--repeat 3] -- train --config X

What each measures: `bench_train.py` (train, losses, diagnostics), `bench_decode.py`
(decode) and `bench_data.py` (data: a corpus of real size, from the text to the first
update). Every measurement runs in a fresh process, so that its peak resident memory
(`peak_rss_mb`, added to its line) is its own.

`compare` runs the measurement after `--` alternately with the seq2seq of `--base` and
with this checkout's (SEQ2SEQ_BENCH_CODE=DIR in the environment picks either by hand),
--repeat times each, prints every JSON line, then a summary line per measurement: the
median, minimum and maximum of each figure on each side and the ratio of the medians (new
over old); with `losses`, the largest relative difference between the two loss curves.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The seq2seq that is measured: this checkout's, or the one the environment variable names
# (an older commit's, under `compare`), imported first by the measuring processes alone
# (`with_peak_memory`); this process reads its options off this checkout's.
CODE_VARIABLE = "SEQ2SEQ_BENCH_CODE"
sys.path.insert(0, str(ROOT))

from bench_data import measure_data  # noqa: E402 (after the path)
from bench_decode import ENGINES, busy_cpus, export_for, measure_decode  # noqa: E402
from bench_train import (  # noqa: E402
    PROFILED_STEPS,
    measure_diagnostics,
    measure_losses,
    measure_train,
)


def in_own_process(function: Callable[..., dict], *args: object) -> dict:
    """`function(*args)` in a fresh process (spawned: nothing of this one's memory), which
    then exits by itself: one terminated leaves its semaphores to the resource tracker's
    "leaked" warning at shutdown."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        result = pool.apply(function, args)
        pool.close()
        pool.join()
    return result


def with_peak_memory(measure: Callable[..., dict], *args: object) -> dict:
    """Runs in the measurement's own process, which imports the measured seq2seq: its line,
    with the process's peak resident memory added."""
    sys.path.insert(0, os.environ.get(CODE_VARIABLE, str(ROOT)))
    result = measure(*args)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    result["peak_rss_mb"] = round(peak_kib / 1024, 1)
    return result


# The figures `compare` summarises, and the fields that say which measurement a line is.
COMPARED = ("target_tokens_per_s", "tokens_per_s", "sentences_per_s", "peak_rss_mb", "mfu", "bleu")
IDENTITY = ("mode", "config", "engine", "beam", "threads", "precision")


def run_side(code: Path, measurement: list[str]) -> list[dict]:
    """The JSON lines of one measurement by this script with the seq2seq of `code`."""
    env = {**os.environ, CODE_VARIABLE: str(code.resolve())}
    command = [sys.executable, str(Path(__file__).resolve()), *measurement]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def summarise(old: list[dict], new: list[dict]) -> dict:
    """Median, minimum and maximum of each figure on each side; new median over old."""
    if old[0]["mode"] == "losses":
        pairs = zip(old[0]["losses"], new[0]["losses"], strict=True)
        worst = max(abs(b - a) / max(abs(a), 1e-12) for a, b in pairs)
        return {**{k: old[0][k] for k in IDENTITY if k in old[0]}, "max_relative_diff": worst}
    summary = {k: old[0][k] for k in IDENTITY if k in old[0]}
    for key in COMPARED:
        if key not in old[0] or key not in new[0]:
            continue
        sides = {"old": [r[key] for r in old], "new": [r[key] for r in new]}
        for side, values in sides.items():
            summary[f"{key}_{side}"] = [statistics.median(values), min(values), max(values)]
        summary[f"{key}_ratio"] = round(
            statistics.median(sides["new"]) / max(statistics.median(sides["old"]), 1e-12), 3
        )
    return summary


def compare(base: Path, repeat: int, measurement: list[str]) -> None:
    """Old and new measured alternately, `repeat` times each, then the summary lines."""
    rows: dict[str, list[list[dict]]] = {"old": [], "new": []}
    for _ in range(repeat):
        for side, code in (("old", base), ("new", ROOT)):
            lines = run_side(code, measurement)
            for line in lines:
                print(json.dumps({"side": side, **line}), flush=True)
            rows[side].append(lines)
    for i in range(len(rows["old"][0])):  # one summary per line of a measurement
        old, new = ([lines[i] for lines in rows[side]] for side in ("old", "new"))
        print(json.dumps({"summary": True, **summarise(old, new)}), flush=True)


class Parser(argparse.ArgumentParser):
    """Bad arguments are one line (argparse adds a usage message): `bench.py: error: ...`."""

    def error(self, message: str):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def at_least(minimum: int) -> Callable[[str], int]:
    """An argument type: a whole number of at least `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value

    return parse


POSITIVE, NON_NEGATIVE = at_least(1), at_least(0)


def add_train_options(mode: argparse.ArgumentParser, steps: int, help_steps: str) -> None:
    mode.add_argument("--config", type=Path, required=True, help="a run config")
    mode.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    mode.add_argument("--steps", type=POSITIVE, default=steps, help=help_steps)
    mode.add_argument("--threads", type=POSITIVE, default=2)
    mode.add_argument("--tokenizer", type=Path, help="a run's tokenizer/ to reuse")


def add_decode_mode(modes) -> None:
    from seq2seq.cli.decoding import add_argparse_options

    decode = modes.add_parser("decode", help="translation speed per beam size")
    decode.add_argument(
        "--run", type=Path, nargs="+", required=True,
        help="a trained run directory; several: their ensemble (torch engines)",
    )  # fmt: skip
    decode.add_argument("--checkpoint", default="best")
    decode.add_argument("--input", type=Path, required=True, help="source lines (.gz is fine)")
    decode.add_argument("--ref", type=Path, help="references, to report BLEU and chrF")
    decode.add_argument("--beam", type=POSITIVE, nargs="+", default=[1, 5])
    decode.add_argument(
        "--threads", type=POSITIVE,
        help="default: the decoder's own (seq2seq translate's), the CPUs other work leaves free",
    )  # fmt: skip
    decode.add_argument(
        "--busy", type=NON_NEGATIVE, default=0,
        help="keep this many CPUs busy meanwhile (processes of a Python loop): a loaded machine",
    )  # fmt: skip
    decode.add_argument("--device", help="cpu or cuda; default: the run's train.device")
    decode.add_argument("--limit", type=POSITIVE, help="only the first N lines")
    decode.add_argument(
        "--constraints", type=Path, help="lexical constraints, a line per input line (torch)"
    )
    add_argparse_options(decode, skip=("beam",))  # the decode section's other fields
    decode.add_argument(
        "--engine", nargs="+", choices=ENGINES, default=["torch"],
        help="torch-int8: int8 linear layers; ct2-*: the run exported to CTranslate2 with "
        "that weight type (the export extra)",
    )  # fmt: skip


def add_train_modes(modes) -> None:
    train = modes.add_parser("train", help="training throughput and model FLOP utilisation")
    add_train_options(train, 50, "timed updates")
    train.add_argument("--warmup", type=NON_NEGATIVE, default=10, help="updates before timing")
    train.add_argument(
        "--profile", type=NON_NEGATIVE, default=0, metavar="ROWS",
        help="then profile --profile-updates more updates; print the ROWS costliest operators",
    )  # fmt: skip
    train.add_argument(
        "--profile-updates", type=POSITIVE, default=PROFILED_STEPS, metavar="N",
        help=f"the updates --profile profiles (default {PROFILED_STEPS}; reading a profile "
        "takes seconds per update of a small RNN)",
    )  # fmt: skip
    train.add_argument(
        "--compile", action="store_true",
        help="torch.compile the model (dynamic shapes) first; the warm-up then includes compiling",
    )  # fmt: skip
    diagnostics = modes.add_parser("diagnostics", help="attention diagnostics' cost")
    diagnostics.add_argument("--config", type=Path, required=True, help="a run config")
    diagnostics.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    diagnostics.add_argument("--steps", type=POSITIVE, default=10, help="timed updates per round")
    diagnostics.add_argument("--repeats", type=POSITIVE, default=3, help="interleaved rounds")
    diagnostics.add_argument("--threads", type=POSITIVE, default=2)
    losses = modes.add_parser("losses", help="the loss of each of a run's first updates")
    add_train_options(losses, 100, "updates from the start")


def add_data_and_compare_modes(modes) -> None:
    data = modes.add_parser("data", help="a corpus of real size: preparation, first update")
    data.add_argument("--pairs", type=int, default=1_000_000, help="synthetic corpus size")
    data.add_argument("--work", type=Path, required=True, help="corpora and runs go here")
    data.add_argument("--config", type=Path, default=ROOT / "configs/multi30k_transformer.yaml")
    data.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    data.add_argument("--ranks", type=int, default=2, help="torchrun processes, besides one")
    data.add_argument(
        "--code", type=Path, default=ROOT, help="the checkout measured (with Multi30k in data/)"
    )
    data.add_argument("--updates", type=int, default=1, help="memory peak over this many")
    data.add_argument("--source", default="data/multi30k/train", help="the sentences joined")
    data.add_argument(
        "--prepared", action="store_true", help="the corpus is prepared: time the first update"
    )
    data.add_argument(
        "--prepare-only", action="store_true", help="time `prepare` alone (data.filters: --set)"
    )
    both = modes.add_parser("compare", help="a measurement on an older checkout and this one")
    both.add_argument("--base", type=Path, required=True, help="the older checkout's root")
    both.add_argument("--repeat", type=POSITIVE, default=3, help="measurements per side")
    both.add_argument("measurement", nargs=argparse.REMAINDER, help="-- MODE OPTIONS...")


def parse_arguments() -> argparse.Namespace:
    from seq2seq.cli.decoding import EVERY_FIELD

    parser = Parser(description=__doc__.split("\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    add_decode_mode(modes)
    add_train_modes(modes)
    add_data_and_compare_modes(modes)
    args = parser.parse_args()
    if args.mode == "decode":  # the decode fields given (but --beam, a list), for the measured code
        given = {name: getattr(args, name) for name in EVERY_FIELD if name != "beam"}
        args.decode = {name: value for name, value in given.items() if value is not None}
    if args.mode == "compare" and not [a for a in args.measurement if a != "--"]:
        parser.error("compare needs a measurement after --, e.g. -- train --config CONFIG")
    for option in ("config", "tokenizer", "run", "input", "ref", "base", "code"):
        given = getattr(args, option, None)
        for path in given if isinstance(given, list) else [given]:
            if path is not None and not path.exists():
                parser.error(f"--{option} {path}: no such file or directory")
    if args.mode == "decode" and len(args.run) > 1 and args.engine != ["torch"]:
        parser.error("an ensemble of runs decodes with --engine torch only")
    return args


def main() -> None:
    from seq2seq.errors import UserError

    try:
        measure_as_asked(parse_arguments())
    except UserError as error:  # a bad config or run, found in a measuring process
        raise SystemExit(f"bench.py: {error}") from None


def measure_as_asked(args: argparse.Namespace) -> None:
    if args.mode == "compare":
        compare(args.base, args.repeat, [a for a in args.measurement if a != "--"])
        return
    if args.mode == "data":  # its commands run in --code (see bench_data.seq2seq)
        args.code, args.config, args.work = (
            p.resolve() for p in (args.code, args.config, args.work)
        )
        measure_data(args)
        return
    measure = {
        "train": measure_train, "losses": measure_losses, "diagnostics": measure_diagnostics
    }.get(args.mode)  # fmt: skip
    if measure is not None:
        print(json.dumps(in_own_process(with_peak_memory, measure, args)), flush=True)
        return
    with tempfile.TemporaryDirectory() as directory, busy_cpus(args.busy):
        for engine in args.engine:
            exported = export_for(args, engine, Path(directory))
            for beam in args.beam:
                measured = in_own_process(
                    with_peak_memory, measure_decode, args, engine, beam, exported
                )
                print(json.dumps(measured), flush=True)


if __name__ == "__main__":
    main()
