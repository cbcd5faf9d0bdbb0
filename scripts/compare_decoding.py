"""Does a change leave decoding's output as it was? Each strategy's output, byte for byte,
from the seq2seq of an older checkout and from this one.

    python scripts/compare_decoding.py --base ../seq2seq-old --run runs/multi30k-transformer \\
        --input data/multi30k/test_2016_flickr.de.gz --ref data/multi30k/test_2016_flickr.en.gz \\
        [--limit 200] [--strategy greedy beam ...] [--work DIR]

Each strategy runs `seq2seq translate` (forced scoring: `seq2seq score`) with the code of
`--base` and then with this checkout's, in fresh processes on one thread, on the first
--limit lines, and prints one JSON line: the strategy, its command's options, whether the
two outputs are byte-identical, and the first line where they differ. Prefixes are each
reference's first word, constraints its last word; the ensemble is the run's best and last
checkpoints. Exit status 1 if any output differs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# strategy -> the options of `seq2seq translate` it is decoded with ("score": forced
# scoring of the references; PREFIXES, CONSTRAINTS: the files made from them).
STRATEGIES = {
    "greedy": ["--beam", "1"],
    "beam": ["--beam", "5"],
    "sampling": ["--sample", "--seed", "3", "--nbest", "2", "--top-p", "0.9"],
    "diverse": ["--beam", "4", "--beam-groups", "2", "--nbest", "4"],
    "constraints": ["--beam", "5", "--constraints", "CONSTRAINTS"],
    "prefixes": ["--beam", "5", "--prefix-file", "PREFIXES"],
    "mbr": ["--beam", "8", "--mbr", "8"],
    "ensemble": ["--beam", "5", "--checkpoint", "best", "--checkpoint", "last"],
    "score": ["score"],
}


def read_text_lines(path: Path, limit: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for line, _ in zip(lines, range(limit), strict=False)]


def guides(references: list[str], work: Path) -> dict[str, Path]:
    """The prefix and constraint files made from the references, and the references."""
    words = [reference.split() or [""] for reference in references]
    files = {
        "PREFIXES": [w[0] for w in words],
        "CONSTRAINTS": [w[-1] for w in words],
        "REFERENCES": references,
    }
    for name, lines in files.items():
        (work / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return {name: work / name for name in files}


def command(strategy: str, args: argparse.Namespace, files: dict[str, Path], out: Path) -> list:
    """The command line of one strategy, writing its output to `out`."""
    source = files["SOURCES"]
    if strategy == "score":
        return ["score", "--run", args.run, "--src", source, "--ref", files["REFERENCES"],
                "--threads", "1", "-o", out]  # fmt: skip
    options = [str(files.get(option, option)) for option in STRATEGIES[strategy]]
    return ["translate", "--run", args.run, "-i", source, "-o", out, "--threads", "1", *options]


def decode_with(code: Path, arguments: list, work: Path) -> bytes:
    """The output of `seq2seq ARGUMENTS` run with the package of `code`."""
    out = Path(arguments[arguments.index("-o") + 1])
    env = os.environ | {"PYTHONPATH": str(code)}
    command_line = [sys.executable, "-m", "seq2seq", *map(str, arguments)]
    done = subprocess.run(command_line, env=env, cwd=work, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{done.stderr.strip()}\nfailed with the code of {code}: {' '.join(command_line)}")
    return out.read_bytes()


def first_difference(old: bytes, new: bytes) -> int | None:
    """The number (from 0) of the first line that differs; None where none does."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    for number, (a, b) in enumerate(zip(old_lines, new_lines, strict=False)):
        if a != b:
            return number
    return None if len(old_lines) == len(new_lines) else min(len(old_lines), len(new_lines))


def compare_strategy(strategy: str, args: argparse.Namespace, files: dict[str, Path]) -> dict:
    outputs = []
    for side, code in (("old", args.base), ("new", ROOT)):
        out = args.work / f"{strategy}.{side}"
        outputs.append(decode_with(code, command(strategy, args, files, out), args.work))
    differs = first_difference(*outputs)
    return {
        "strategy": strategy,
        "options": STRATEGIES[strategy],
        "lines": len(outputs[0].splitlines()),
        "identical": outputs[0] == outputs[1],
        "first_difference": differs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the older checkout's root")
    parser.add_argument("--run", type=Path, required=True, help="a trained run directory")
    parser.add_argument("--input", type=Path, required=True, help="source lines (.gz is fine)")
    parser.add_argument("--ref", type=Path, required=True, help="their references")
    parser.add_argument("--limit", type=int, default=200, help="the first N lines")
    parser.add_argument("--strategy", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    parser.add_argument("--work", type=Path, help="keep the outputs here (default: a temp dir)")
    args = parser.parse_args()
    args.base, args.run = args.base.resolve(), args.run.resolve()
    with tempfile.TemporaryDirectory() as temporary:
        args.work = (args.work or Path(temporary)).resolve()
        args.work.mkdir(parents=True, exist_ok=True)
        files = guides(read_text_lines(args.ref, args.limit), args.work)
        sources = args.work / "SOURCES"
        sources.write_text(
            "".join(line + "\n" for line in read_text_lines(args.input, args.limit)),
            encoding="utf-8",
        )
        files["SOURCES"] = sources
        rows = [compare_strategy(strategy, args, files) for strategy in args.strategy]
    for row in rows:
        print(json.dumps(row), flush=True)
    sys.exit(0 if all(row["identical"] for row in rows) else 1)


if __name__ == "__main__":
    main()
