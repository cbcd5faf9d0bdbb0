"""The calibration grid of the sweep report's comparison (`seq2seq.significance.compare`)
and of the candidates it was chosen over, on simulated sweeps with a known truth
(`seq2seq.calibration`):

    python scripts/bench_significance.py [--null 2000] [--shifted 500] [--jobs 2] \\
        [--seeds 3 5 10] [--ratios 0 1 10] [--sentences 200 3000] [--paired yes|no] \\
        [--out FILE]
    python scripts/bench_significance.py --seed-dominated 20000

For each regime (seeds per system x the seeds' SD over a run's sentence noise x test
sentences x seeds paired or not) and metric, it prints a Markdown table row: how often
each test rejects at 5% under no difference (type I), how often its 95% interval covers
the true difference (over the null and the shifted sweeps), and how often it rejects a
shifted system (power). The candidates, from the same terms (`significance.VarianceTerms`):
- `compare`: the seeds' spread plus the part of the sentences' variance that the spread
  does not hold, on Welch-Satterthwaite degrees of freedom with the seed terms at a
  confidence bound (`significance.variance_of_difference`);
- plain df: the same variance on plain Welch-Satterthwaite degrees of freedom;
- seeds only: a paired t over seeds (unpaired: Welch's t);
- sentences only: the seeds pooled as if they were more sentences (a paired bootstrap's
  test in its linearised form);
- both whole: the seeds' spread plus the sentences' whole variance (counting the runs' own
  sentence noise twice).
A figure of the type I error over N sweeps has a standard error of about
sqrt(0.05 x 0.95 / N): 0.5% at 2,000. Each regime draws from the random seed of its place
in the whole grid, so that a part of it (`--paired no`) repeats those rows.

`--seed-dominated N` instead draws N sweeps with no difference of two unpaired systems
whose seeds spread apart (`calibration.seed_dominated`), and prints the type I error of
`compare` and of the same test with the two seed terms pooled as Student's t does.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from seq2seq.calibration import Regime, Simulation, seed_dominated  # noqa: E402
from seq2seq.metrics import METRICS  # noqa: E402
from seq2seq.significance import (  # noqa: E402
    ALPHA,
    VarianceTerms,
    satterthwaite,
    seed_groups,
    t_interval,
    variance_of_difference,
    variance_terms,
)

CANDIDATES = {  # name -> terms -> (variance of Δ, degrees of freedom)
    "compare": variance_of_difference,
    "plain df": lambda t: satterthwaite([*t.seeds, (t.shared, t.count - 1)]),
    "seeds only": lambda t: satterthwaite(t.seeds),
    "sentences only": lambda t: satterthwaite([(t.sentences, t.count - 1)]),
    "both whole": lambda t: satterthwaite([*t.seeds, (t.sentences, t.count - 1)]),
}


def outcomes(terms: VarianceTerms, difference: float, truth: float) -> dict[str, tuple]:
    """Candidate -> (rejected at ALPHA, interval covers `truth`)."""
    found = {}
    for name, variance_of in CANDIDATES.items():
        variance, dof = variance_of(terms)
        low, high, p = t_interval(difference, math.sqrt(variance), dof)
        found[name] = (p < ALPHA, low <= truth <= high)
    return found


def measure(job: tuple[Regime, int, int, int]) -> tuple[Regime, dict]:
    """Regime -> metric -> candidate -> (type I, coverage, power)."""
    regime, null, shifted, seed = job
    simulation = Simulation(regime, seed)
    truth = simulation.truth()
    tallies = {m.key: {c: np.zeros(3) for c in CANDIDATES} for m in METRICS}
    for index in range(null + shifted):
        is_shifted = index >= null
        for key, (baseline, cell) in simulation.sweep(is_shifted).items():
            difference = float(cell.observed.mean() - baseline.observed.mean())
            terms = variance_terms(seed_groups(baseline, cell))
            found = outcomes(terms, difference, truth[key] if is_shifted else 0.0)
            for name, (rejected, covered) in found.items():
                tallies[key][name] += (
                    rejected and not is_shifted,
                    covered,
                    rejected and is_shifted,
                )
    rates = {
        key: {c: (t[0] / null, t[1] / (null + shifted), t[2] / shifted) for c, t in by.items()}
        for key, by in tallies.items()
    }
    return regime, rates


def table(results: list[tuple[Regime, dict]], null: int, shifted: int) -> str:
    head = (
        f"| seeds | seed SD / sentence noise | sentences | seeds paired | metric | type I | "
        f"coverage | power | plain df: type I | seeds only: type I, power | "
        f"sentences only: type I | both whole: type I |\n|{'---:|' * 4}---|{'---:|' * 7}"
    )
    rows = [head]
    for regime, rates in results:
        for metric in METRICS:
            by = rates[metric.key]
            ours, seeds = by["compare"], by["seeds only"]
            rows.append(
                f"| {regime.seeds} | {regime.seed_ratio:g} | {regime.sentences:,} | "
                f"{'yes' if regime.paired else 'no'} | {metric.title} | {ours[0]:.3f} | "
                f"{ours[1]:.3f} | {ours[2]:.2f} | {by['plain df'][0]:.3f} | "
                f"{seeds[0]:.3f}, {seeds[2]:.2f} | "
                f"{by['sentences only'][0]:.3f} | {by['both whole'][0]:.3f} |"
            )
    note = f"{null:,} sweeps with no difference and {shifted:,} with a shift per regime"
    return "\n".join(rows) + f"\n\n({note}.)"


def pooled(terms: VarianceTerms) -> tuple[float, float]:
    """`compare`'s V and df with two seed terms of equal df pooled, as Student's t does."""
    seeds = terms.seeds
    if len(seeds) == 2 and seeds[0][1] == seeds[1][1]:
        seeds = [(seeds[0][0] + seeds[1][0], seeds[0][1] + seeds[1][1])]
    return variance_of_difference(VarianceTerms(seeds, terms.sentences, terms.own, terms.count))


def seed_dominated_table(draws: int) -> str:
    """Type I error of `compare` and of `pooled`, unpaired seeds that spread apart."""
    rows = ["| seeds | seed SDs | compare: type I | pooled: type I |", "|---|---|---:|---:|"]
    for seeds, spreads in itertools.product([(3, 3), (5, 5), (3, 5)], [(1, 1), (1, 3), (1, 10)]):
        rng, rejected = np.random.default_rng(0), np.zeros(2)
        for _ in range(draws):
            baseline, cell = seed_dominated(rng, seeds, spreads)
            difference = float(cell.observed.mean() - baseline.observed.mean())
            terms = variance_terms(seed_groups(baseline, cell))
            for k, variance_of in enumerate((variance_of_difference, pooled)):
                variance, dof = variance_of(terms)
                rejected[k] += t_interval(difference, math.sqrt(variance), dof)[2] < ALPHA
        ours, student = rejected / draws
        label = f"{seeds[0]} vs {seeds[1]} | {spreads[0]}, {spreads[1]}"
        rows.append(f"| {label} | {ours:.3f} | {student:.3f} |")
    return "\n".join(rows) + f"\n\n({draws:,} sweeps a row.)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--null", type=int, default=2000)
    parser.add_argument("--shifted", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 5, 10])
    parser.add_argument("--ratios", type=float, nargs="+", default=[0, 1, 10])
    parser.add_argument("--sentences", type=int, nargs="+", default=[200, 3000])
    parser.add_argument("--paired", choices=["yes", "no"], help="those regimes alone")
    parser.add_argument("--seed-dominated", type=int, metavar="N", help="see above")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args()
    if args.seed_dominated:
        text = seed_dominated_table(args.seed_dominated)
    else:
        grid = itertools.product(args.seeds, args.ratios, args.sentences, (True, False))
        kept = {"yes": (True,), "no": (False,), None: (True, False)}[args.paired]
        jobs = [
            (Regime(*values), args.null, args.shifted, i)
            for i, values in enumerate(grid)
            if values[3] in kept
        ]
        with Pool(args.jobs) as pool:
            results = pool.map(measure, jobs, chunksize=1)
        text = table(results, args.null, args.shifted)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
