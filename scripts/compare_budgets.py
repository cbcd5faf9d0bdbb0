"""Test BLEU of a sweep's runs at its budget and at a longer budget, the figures of the
study page's "Learning speed against final quality" (docs/results/attention-study-v2.md).

    cd docs/results
    python ../../scripts/compare_budgets.py attention-rnn-v2 attention-rnn-v2-long
    python ../../scripts/compare_budgets.py attention-transformer-v2 attention-transformer-v2-long

SHORT and LONG are sweep directories whose runs share their names (the same cell and
seed); LONG's runs continue the same schedule further, so SHORT's test scores are the
runs' scores at the shorter budget. Every run finished in LONG is read with its SHORT
twin. Prints the table of runs, then per test set: the runs whose BLEU rose, the mean
gain (min to max), Spearman's rank correlation between the budgets of the cells' means
(over the seeds finished in LONG; with and without `--leave-out` cells, default the
`none` type), each cell's mean gain, and the spread (largest minus smallest mean) of the
cells that are not left out at each budget. Last, whether each run repeats its SHORT twin
over SHORT's budget (every validation's loss equal, as training on the same kind of CPU
does; meta.json names the machines), and for those that do not, the first validation
whose loss differs and both validation BLEUs at the budget (then the mean, range and signs
of those differences): how far the CPUs' rounding alone moved them; last, the gain in
validation BLEU within each LONG run from SHORT's budget to its end, which no such
difference touches."""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

from scipy.stats import spearmanr

RUN = re.compile(r"(?P<cell>.*),seed=(?P<seed>\d+)")


def scores(run: Path) -> dict[str, float]:
    """Test BLEU of a run per test set."""
    found = json.loads((run / "test" / "scores.json").read_text())
    return {name: metrics["bleu"] for name, metrics in found.items()}


def pairs(short: Path, long: Path) -> dict[tuple[str, int], tuple[dict, dict]]:
    """(cell, seed) -> (its SHORT scores, its LONG scores), for LONG's finished runs."""
    found = {}
    for run in sorted((long / "runs").iterdir()):
        if (run / "test" / "scores.json").is_file():
            match = RUN.fullmatch(run.name)
            key = (match["cell"], int(match["seed"]))
            found[key] = (scores(short / "runs" / run.name), scores(run))
    return found


def validations(run: Path) -> dict[int, dict]:
    """Step -> the run's validation there (summary.json)."""
    summary = json.loads((run / "summary.json").read_text())
    return {validation["step"]: validation for validation in summary["validations"]}


def left_their_twins(short: Path, long: Path, found: dict) -> None:
    """The repetition check's lines, LONG's runs that do not repeat their SHORT twin; then
    the gain in validation BLEU within each LONG run."""
    apart, gains = [], []
    for cell, seed in found:
        name = f"{cell},seed={seed}"
        twin, run = validations(short / "runs" / name), validations(long / "runs" / name)
        budget = max(twin)
        gains.append(run[max(run)]["bleu"] - run[budget]["bleu"])
        differ = [
            step for step in sorted(twin) if run.get(step, {}).get("loss") != twin[step]["loss"]
        ]
        if differ:
            apart.append((cell, seed, differ[0], budget, twin[budget]["bleu"], run[budget]["bleu"]))
    print(f"\n{len(found) - len(apart)} of {len(found)} runs repeat their twin over its budget")
    for cell, seed, first, budget, before, now in apart:
        print(f"  not `{cell_name(cell)}`, seed {seed}: from update {first} on; validation BLEU "
              f"at {budget} {before:.2f} (twin) against {now:.2f}")  # fmt: skip
    if apart:
        moved = [now - before for *_, before, now in apart]
        above, below = sum(m > 0 for m in moved), sum(m < 0 for m in moved)
        print(f"  their validation BLEU at the budget minus their twins': mean "
              f"{statistics.mean(moved):+.2f} ({min(moved):+.2f} to {max(moved):+.2f}); "
              f"above in {above}, below in {below}")  # fmt: skip
    print(f"validation BLEU within each run, its budget -> its end: mean gain "
          f"{statistics.mean(gains):+.2f} ({min(gains):+.2f} to {max(gains):+.2f})")  # fmt: skip


def cell_name(cell: str) -> str:
    """The cell's name without its swept keys' prefixes (`attention.type=dot` -> `dot`)."""
    return ", ".join(part.split("=", 1)[1] for part in cell.split(","))


def describe(found: dict[tuple[str, int], tuple[dict, dict]], test: str, leave_out: set) -> None:
    """One test set's summary lines."""
    gains = [long[test] - short[test] for short, long in found.values()]
    print(f"\n{test}: BLEU rose in {sum(g > 0 for g in gains)} of {len(gains)} runs; mean gain "
          f"{statistics.mean(gains):+.2f} ({min(gains):+.2f} to {max(gains):+.2f})")  # fmt: skip
    by_cell: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for (cell, _), (short, long) in found.items():
        by_cell[cell_name(cell)].append((short[test], long[test]))
    means = {
        cell: (statistics.mean(s for s, _ in v), statistics.mean(lo for _, lo in v))
        for cell, v in by_cell.items()
    }
    kept = {cell: m for cell, m in means.items() if cell not in leave_out}
    for label, chosen in (("all cells", means), (f"without {sorted(leave_out)}", kept)):
        if len(chosen) > 2:
            rho = spearmanr(
                [s for s, _ in chosen.values()], [lo for _, lo in chosen.values()]
            ).statistic
            print(f"  Spearman between the budgets' cell means, {label}: {rho:.2f}")
    for cell, (s, lo) in sorted(means.items(), key=lambda item: item[1][0] - item[1][1]):
        print(f"  {cell}: {s:.2f} -> {lo:.2f} ({lo - s:+.2f}, {len(by_cell[cell])} seeds)")
    if kept:
        short, long = ([m[i] for m in kept.values()] for i in (0, 1))
        print(f"  spread of the cells' means (not left out): {max(short) - min(short):.2f} -> "
              f"{max(long) - min(long):.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("short", type=Path)
    parser.add_argument("long", type=Path)
    parser.add_argument("--leave-out", nargs="*", default=["none"])
    args = parser.parse_args()
    found = pairs(args.short, args.long)
    if not found:
        raise SystemExit(f"{args.long}: no finished run")
    tests = list(next(iter(found.values()))[1])
    print(f"| run | {' | '.join(f'{t}: short -> long' for t in tests)} |")
    print("|---|" + "---:|" * len(tests))
    for (cell, seed), (short, long) in found.items():
        row = " | ".join(f"{short[t]:.2f} -> {long[t]:.2f}" for t in tests)
        print(f"| `{cell_name(cell)}`, seed {seed} | {row} |")
    for test in tests:
        describe(found, test, set(args.leave_out))
    left_their_twins(args.short, args.long, found)


if __name__ == "__main__":
    main()
