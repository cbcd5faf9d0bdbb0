"""Do the attention types keep their order across translation directions? The figures of
step 7 of the attention study (docs/results/attention-study-v2.md, "The commands"), from the
committed reports of one architecture's sweeps, one sweep a direction.

    cd docs/results
    python ../../scripts/compare_directions.py de-en=attention-rnn-v2 \
        fr-en=attention-rnn-v2-fren en-de=attention-rnn-v2-ende

Each DIRECTION=SWEEP reads SWEEP/report/results.csv (`seq2seq sweep report SWEEP` writes
it). Only the cells and the test sets every sweep has are compared, so a direction's
family of tests is the same size as the others': the seed-aware p-values against the
baseline (unadjusted in the report, and independent of the report's other cells) are
Holm-adjusted again over those cells and test sets, per direction and metric. Prints per
test set the cells' means in each direction with each difference from the baseline, its
95% interval and adjusted p; Spearman's rank correlation of the cells' means between each
two directions (with n cells, a correlation of 1 arises by chance with probability 1/n!);
and per cell and test set whether its difference from the baseline keeps its sign in every
direction, and whether it is significant in every one (as the report calls it: an adjusted
p below 0.05, with at least 3 seeds on each side).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

from scipy.stats import spearmanr

from seq2seq.significance import ALPHA, MIN_SEEDS, holm


@dataclass(frozen=True)
class Difference:
    """A cell against its direction's baseline on one test set and metric."""

    diff: float
    low: float
    high: float
    p: float
    p_holm: float = math.nan


@dataclass
class Direction:
    """One direction's report, restricted to the compared cells and test sets."""

    name: str
    baseline: str
    seeds: dict[str, str]  # cell -> its seeds, as the report lists them
    means: dict[tuple[str, str], float]  # (cell, test set) -> the metric's mean
    differences: dict[tuple[str, str], Difference]  # (cell, test set), baseline aside


def read_report(sweep: Path, metric: str) -> list[dict[str, str]]:
    """The rows of SWEEP/report/results.csv, a cell each; one line where there is none, or
    no column of `metric`."""
    path = sweep / "report" / "results.csv"
    if not path.is_file():
        raise SystemExit(f"{path}: no report; make it with `seq2seq sweep report SWEEP`")
    with path.open(newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    if not rows:
        raise SystemExit(f"{path}: no finished cell in the report")
    if not test_sets(rows, metric):
        raise SystemExit(f"{path}: no column of metric {metric!r} (bleu, chrf or ter)")
    return rows


def test_sets(rows: list[dict[str, str]], metric: str) -> list[str]:
    """The report's test sets, in its column order."""
    suffix = f"_{metric}_mean"
    return [column.removesuffix(suffix) for column in rows[0] if column.endswith(suffix)]


def cell_of(row: dict[str, str]) -> str:
    """A row's cell: its first column, the swept key's value."""
    return row[next(iter(row))]


def direction(name: str, rows: list[dict[str, str]], cells: list, tests: list, metric: str):
    """`name`'s figures on `cells` x `tests`, its p-values Holm-adjusted over that family."""
    by_cell = {cell_of(row): row for row in rows if cell_of(row) in cells}
    baselines = [cell for cell, row in by_cell.items() if row["baseline"] == "True"]
    if len(baselines) != 1:
        raise SystemExit(
            f"{name}: its baseline is not among the cells every sweep has ({', '.join(cells)}): "
            "compare sweeps of one baseline"
        )
    (baseline,) = baselines
    means, differences = {}, {}
    for cell, test in itertools.product(cells, tests):
        row, column = by_cell[cell], f"{test}_{metric}_"
        means[cell, test] = float(row[column + "mean"])
        if cell != baseline:
            parts = [float(row[column + part]) for part in ("diff", "low", "high", "p")]
            differences[cell, test] = Difference(*parts)
    # The report's p-values are rounded to 4 places and Holm multiplies them by up to
    # the family's size, so an adjusted p can differ from the report's in the third decimal.
    adjusted = holm([d.p for d in differences.values()])
    for (place, found), p in zip(list(differences.items()), adjusted, strict=True):
        differences[place] = Difference(found.diff, found.low, found.high, found.p, p)
    seeds = {cell: by_cell[cell]["seeds"] for cell in cells}
    return Direction(name, baseline, seeds, means, differences)


def load(named: list[str], metric: str) -> tuple[list[Direction], list[str], list[str]]:
    """The directions given as NAME=SWEEP, their shared cells (in the first report's order)
    and shared test sets."""
    reports = {}
    for given in named:
        name, _, sweep = given.partition("=")
        if not sweep or name in reports:
            raise SystemExit(f"{given}: give each direction once, as NAME=SWEEP (fr-en=SWEEP_DIR)")
        reports[name] = read_report(Path(sweep), metric)
    if len(reports) < 2:
        raise SystemExit("give two directions or more: one has nothing to be compared with")
    first = next(iter(reports.values()))
    shared = set.intersection(*({cell_of(row) for row in r} for r in reports.values()))
    cells = [cell_of(row) for row in first if cell_of(row) in shared]
    everywhere = set.intersection(*(set(test_sets(r, metric)) for r in reports.values()))
    tests = [t for t in test_sets(first, metric) if t in everywhere]
    if len(cells) < 2 or not tests:
        raise SystemExit("the sweeps share fewer than two cells or no test set: nothing to compare")
    return [direction(n, rows, cells, tests, metric) for n, rows in reports.items()], cells, tests


def means_table(directions: list[Direction], cells: list[str], test: str) -> None:
    """Each cell's mean per direction; beside it the difference from the baseline."""
    print(f"\n{test}\n\n| cell | {' | '.join(d.name for d in directions)} |")
    print("|---|" + "---:|" * len(directions))
    for cell in cells:
        entries = []
        for d in directions:
            entry = f"{d.means[cell, test]:.2f}"
            if (cell, test) in d.differences:
                found = d.differences[cell, test]
                interval = f"[{found.low:+.2f}, {found.high:+.2f}]"
                entry += f" ({found.diff:+.2f} {interval}, p_holm {found.p_holm:.3f})"
            entries.append(entry)
        print(f"| `{cell}` | {' | '.join(entries)} |")


def correlations(directions: list[Direction], cells: list[str], test: str) -> None:
    """Spearman's rank correlation of the cells' means between each two directions (none
    where every cell ties in one of them)."""
    for one, other in itertools.combinations(directions, 2):
        x, y = ([d.means[c, test] for c in cells] for d in (one, other))
        rho = "undefined (the cells tie)" if min(len(set(x)), len(set(y))) < 2 else None
        rho = rho or f"{spearmanr(x, y).statistic:+.2f}"
        print(f"  Spearman {one.name} vs {other.name}: {rho} ({len(cells)} cells)")


def decidable(direction: Direction, cell: str) -> bool:
    """Whether the cell and its baseline have the seeds a call needs (the report's rule)."""
    return all(len(direction.seeds[c].split()) >= MIN_SEEDS for c in (cell, direction.baseline))


def kept(directions: list[Direction], cells: list[str], tests: list[str], alpha: float) -> None:
    """Per cell and test set: the signs of its differences and where they are significant
    (where the seeds can decide: none is called with fewer than MIN_SEEDS a side)."""
    print(f"\ndifferences from the baseline (significant: p_holm < {alpha}, {MIN_SEEDS}+ seeds):")
    for cell, test in itertools.product(cells, tests):
        found = [d.differences.get((cell, test)) for d in directions]
        if any(f is None for f in found):
            continue  # a baseline somewhere: no difference to follow
        signs = {(f.diff > 0) - (f.diff < 0) for f in found}  # 0: no difference at all
        significant = [
            d.name
            for d, f in zip(directions, found, strict=True)
            if f.p_holm < alpha and decidable(d, cell)
        ]
        if 0 in signs:
            verdict = "no difference in a direction"
        else:
            verdict = "keeps its sign" if len(signs) == 1 else "changes sign"
        if verdict == "keeps its sign" and len(significant) == len(directions):
            verdict += ", significant in every direction"
        else:
            verdict += f", significant in {', '.join(significant) or 'none'}"
        diffs = ", ".join(f"{d.name} {f.diff:+.2f}" for d, f in zip(directions, found, strict=True))
        print(f"  `{cell}` on {test}: {diffs}: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directions", nargs="+", metavar="DIRECTION=SWEEP")
    parser.add_argument("--metric", default="bleu", help="a report metric: bleu, chrf, ter")
    parser.add_argument("--alpha", type=float, default=ALPHA)
    args = parser.parse_args()
    directions, cells, tests = load(args.directions, args.metric)
    bases = {d.baseline for d in directions}
    if len(bases) > 1:
        named = ", ".join(sorted(bases))
        raise SystemExit(f"the sweeps' baselines differ ({named}): compare sweeps of one baseline")
    for d in directions:
        print(f"{d.name}: seeds {'; '.join(f'{c} {s}' for c, s in d.seeds.items())}")
    for test in tests:
        means_table(directions, cells, test)
        correlations(directions, cells, test)
    kept(directions, cells, tests, args.alpha)


if __name__ == "__main__":
    main()
