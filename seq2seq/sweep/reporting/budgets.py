"""The report section of a continued sweep (`continue_from`): each cell's test score (the
headline metric, BLEU) at the first sweep's budget beside this sweep's, on the seeds
finished at both, and each cell's difference from the baseline at both budgets, on the
seeds the cell and the baseline both have. A gap that closes with the longer training was
about learning speed; one that stays, about final quality.

The first budget's scores are computed again from the first sweep's hypotheses, as this
sweep's tables compute theirs.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from seq2seq.data.sources import read_corpus
from seq2seq.errors import UserError
from seq2seq.metrics import HEADLINE
from seq2seq.sweep.directory import FinishedRun, NotFinished, SweepDir
from seq2seq.sweep.reporting.results import SweepResults
from seq2seq.sweep.spec import Cell, Sweep

Scores = dict[tuple[str, int], float]  # (cell key, seed) -> the score on one test set
Steps = dict[tuple[str, int], int]  # (cell key, seed) -> the updates the run trained


def budget_tables(results: SweepResults) -> list[str]:
    """The section's markdown lines; [] for a sweep that continues none."""
    source = results.sweep.definition.continue_from
    if source is None or not results.cells:
        return []
    lines = ["## The first budget against this one", ""]
    first_dir = SweepDir(Path(source))
    try:
        first_sweep = first_dir.load()
        first, first_steps, left_out = _first_scores(results, first_sweep, first_dir)
    except (OSError, ValueError, UserError) as error:
        problem = str(error).splitlines()[0]
        return [
            *lines,
            f"This sweep continues the runs of `{source}`, which cannot be read here "
            f"({problem}): no comparison of the budgets.",
            "",
        ]
    labels = _labels(first_steps, results)
    for name in results.test_sets:
        this = {
            (result.cell.key, seed): float(score)
            for result in results.cells
            if name in result.scores
            for seed, score in zip(*_observed(result.scores[name]), strict=True)
        }
        lines += [f"### {name}", "", *_table(results, first.get(name, {}), this, labels), ""]
    lines += [
        f"{HEADLINE.title} at the first sweep's budget (`{source}`, {labels[0]}) and at this "
        f"one ({labels[1]}), means over the seeds finished at both; gain: the mean of each "
        "seed's change. Δ baseline: the cell's mean minus the baseline's on the seeds both "
        "have at both budgets: a gap that closes with the longer training was about learning "
        "speed, one that stays is about final quality. These differences have no test of "
        "their own: read them against the seeds' spread and the intervals above.",
        "",
    ]
    if left_out:
        lines += [f"Left out (not finished in `{source}`): {', '.join(left_out)}.", ""]
    return lines


def _observed(scored: dict) -> tuple[tuple[int, ...], list[float]]:
    headline = scored[HEADLINE.key]
    return headline.seeds, list(headline.observed)


def _first_scores(
    results: SweepResults, first_sweep: Sweep, first_dir: SweepDir
) -> tuple[dict[str, Scores], Steps, list[str]]:
    """Test set -> the first sweep's score of each run that this sweep continued, the
    updates each of those runs trained there, and the runs of this sweep whose first run is
    not finished there."""
    cells = {cell.key: cell for cell in first_sweep.cells}
    found: dict[str, Scores] = {}
    steps: Steps = {}
    left_out = []
    for result in results.cells:
        for seed in result.seeds:
            run = _first_run(first_sweep, first_dir, cells.get(result.cell.key), seed)
            if run is None:
                left_out.append(f"{result.cell.title}, seed {seed}")
                continue
            steps[result.cell.key, seed] = run.summary.steps
            config = first_sweep.run(cells[result.cell.key], seed).config
            for corpus in config.data.test:  # the test sets whose hypotheses it read
                name = config.data.test_name(corpus)
                references = read_corpus(corpus, *config.data.pair(corpus)).tgt
                sums = HEADLINE.sentence_statistics(run.hypotheses[name], references).sum(axis=0)
                score = float(HEADLINE.score_sums(sums[None])[0])
                found.setdefault(name, {})[result.cell.key, seed] = score
    return found, steps, left_out


def _first_run(
    sweep: Sweep, directory: SweepDir, cell: Cell | None, seed: int
) -> FinishedRun | None:
    """The first sweep's finished run of `cell` and `seed`; None where it has none."""
    if cell is None or seed not in sweep.definition.seeds:
        return None
    try:
        return directory.finished(sweep.run(cell, seed))
    except NotFinished:
        return None


def _labels(first_steps: Steps, results: SweepResults) -> tuple[str, str]:
    """Each budget in the updates its runs trained (summary.json), over the runs finished at
    both: what the runs reached, not what their configs asked (early stopping ends runs
    sooner, and a continued run's config need not say where its first run stopped)."""
    this_steps = {
        (result.cell.key, seed): run.summary.steps
        for result in results.cells
        for seed, run in result.runs.items()
    }
    both = sorted(first_steps.keys() & this_steps.keys())
    if not both:
        return "the first budget", "this budget"
    return _updates([first_steps[run] for run in both]), _updates([this_steps[run] for run in both])


def _updates(steps: list[int]) -> str:
    low, high = min(steps), max(steps)
    return f"{low:,} updates" if low == high else f"{low:,}–{high:,} updates"


def _table(
    results: SweepResults, first: Scores, this: Scores, labels: tuple[str, str]
) -> list[str]:
    lines = [
        f"| cell | seeds | {HEADLINE.title}, {labels[0]} | {labels[1]} | gain | "
        f"Δ baseline, {labels[0]} | {labels[1]} |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results.cells:
        key = result.cell.key
        seeds = [s for s in result.seeds if (key, s) in first and (key, s) in this]
        if not seeds:
            continue
        before = [first[key, s] for s in seeds]
        after = [this[key, s] for s in seeds]
        gain = statistics.fmean(a - b for a, b in zip(after, before, strict=True))
        found = results.baseline_of(result)
        baseline = found.cell.key if found else None
        gaps = "baseline | " if key == baseline else _gaps(first, this, key, baseline, seeds)
        lines.append(
            f"| {result.cell.title} | {len(seeds)} | {statistics.fmean(before):.2f} | "
            f"{statistics.fmean(after):.2f} | {gain:+.2f} | {gaps} |"
        )
    return lines


def _gaps(first: Scores, this: Scores, key: str, baseline: str | None, seeds: list[int]) -> str:
    """The cell's mean minus the baseline's at each budget, on the seeds both have at both."""
    paired = [s for s in seeds if (baseline, s) in first and (baseline, s) in this]
    if not paired:
        return "- | -"
    return " | ".join(
        f"{statistics.fmean(scores[key, s] - scores[baseline, s] for s in paired):+.2f}"
        for scores in (first, this)
    )
