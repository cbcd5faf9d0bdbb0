"""The calls of sweep reports that changed between a git revision and the working tree:

    python scripts/changed_calls.py REV docs/results/NAME [docs/results/NAME ...]

For each report (DIR/report/results.csv), each cell against its baseline on each test
set and metric: whether the comparison was significant at REV (its Holm-adjusted p below
0.05 and, by that revision's rule, its seeds able to decide: an exact permutation test's
smallest p, 2 / C(2n, n) for n seeds a side, below 0.05) and whether it is now (the rule
of `seq2seq.significance`: MIN_SEEDS or more a side). Prints a Markdown table of the
comparisons whose call changed, then how many comparisons each report holds.
"""

from __future__ import annotations

import csv
import io
import math
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from seq2seq.metrics import METRICS  # noqa: E402
from seq2seq.significance import ALPHA, MIN_SEEDS  # noqa: E402


def rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def old_decidable(seeds: int) -> bool:
    return 2 / math.comb(2 * seeds, seeds) < ALPHA


def calls(table: list[dict[str, str]], decidable) -> dict[tuple[str, str, str], tuple]:
    """(cell, test set, metric) -> (Δ, Holm p, significant) of each compared cell."""
    found = {}
    for row in table:
        cell = ", ".join(v for k, v in row.items() if "." in k and not k.startswith("test"))
        for key, value in row.items():
            if not key.endswith("_p_holm") or value == "":
                continue
            stem = key.removesuffix("_p_holm")
            name, metric = stem.rsplit("_", 1)
            p, seeds = float(value), len(row["seeds"].split())
            found[(cell, name, metric)] = (
                float(row[f"{stem}_diff"]),
                p,
                p < ALPHA and decidable(seeds),
            )
    return found


def main() -> None:
    revision, *directories = sys.argv[1:]
    titles = {m.key: m.title for m in METRICS}
    print("| report | cell | test set | metric | Δ before -> now | p (Holm) before -> now | call |")
    print("|---|---|---|---|---:|---:|---|")
    counts = []
    for directory in directories:
        path = Path(directory) / "report/results.csv"
        before_text = subprocess.run(
            ["git", "show", f"{revision}:{path}"], capture_output=True, text=True, check=True
        ).stdout
        before = calls(rows(before_text), old_decidable)
        now = calls(rows(path.read_text()), lambda seeds: seeds >= MIN_SEEDS)
        counts.append(f"{Path(directory).name}: {len(now)}")
        for key in sorted(now):
            (d0, p0, s0), (d1, p1, s1) = before[key], now[key]
            if s0 != s1:
                call = "significant -> not" if s0 else "not -> significant"
                cell, name, metric = key
                print(
                    f"| {Path(directory).name} | {cell} | {name} | {titles[metric]} | "
                    f"{d0:+.2f} -> {d1:+.2f} | {p0:.3f} -> {p1:.3f} | {call} |"
                )
    print(f"\nComparisons per report: {'; '.join(counts)}.")


if __name__ == "__main__":
    main()
