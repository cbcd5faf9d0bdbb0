"""The tables of a sweep's report (results.md), each with the note that says what its
numbers mean: a table per test set comparing every cell with the baseline, whether the
ranking holds across test sets, the training table and the machines the runs trained on,
BLEU by source length."""

from __future__ import annotations

from collections import Counter

from seq2seq.metrics import METRICS, length_buckets
from seq2seq.significance import ALPHA, MIN_SEEDS, Comparison
from seq2seq.sweep.reporting.results import (
    LENGTH_EDGES,
    STATISTICS,
    CellResult,
    Spread,
    SweepResults,
)
from seq2seq.sweep.spec import format_value

_HEADINGS = {  # STATISTICS in results.md
    "best_step": "best step",
    "valid_ppl": "valid ppl",
    "train_seconds": "train s",
    "target_tokens_per_s": "tokens/s",
    "parameters": "parameters",
}


TRAINING_NOTE = (
    "BLEU, last checkpoint: the test BLEU of each run's last checkpoint (mean ± standard "
    "deviation over the seeds), beside the checkpoint rule's above, to show how much the "
    "rule matters; - where a run translated the test sets with another checkpoint and kept "
    "no scores of its last (runs trained before test/last/ was written). The other columns "
    "are means over the seeds (summary.json); best step: the best validation step by "
    "`train.metric`; valid ppl: the validation perplexity at that step."
)


def length_table(results: SweepResults, name: str) -> list[str]:
    """A row per cell: BLEU of each source-length bucket of test set `name`."""
    cells = [c for c in results.cells if name in c.by_length]
    if not cells:
        return []
    counts = [count for count, _ in cells[0].by_length[name]]
    buckets = [f"{b} ({n})" for b, n in zip(length_buckets(LENGTH_EDGES), counts, strict=True)]
    lines = [
        f"### {name}: BLEU by source length",
        "",
        "Source length in words (sentences per bucket); BLEU of the seeds' hypotheses pooled.",
        "",
        "| cell | " + " | ".join(buckets) + " |",
        "|---|" + "---:|" * len(buckets),
    ]
    for result in cells:
        scores = [bucket_bleu(result, name, i) for i in range(len(buckets))]
        row = ["-" if b is None else f"{b:.2f}" for b in scores]
        lines.append(f"| {result.cell.title} | " + " | ".join(row) + " |")
    return [*lines, ""]


def bucket_bleu(result: CellResult, name: str, bucket: int) -> float | None:
    scored = result.by_length.get(name)
    return scored[bucket][1] if scored else None


def _cell_columns(results: SweepResults, result: CellResult) -> list[str]:
    """The grid values of a cell (the baseline's marked) and its number of seeds."""
    row = [format_value(v) for _, v in result.cell.values]
    row[0] += " (baseline)" if results.sweep.baseline.holds(result.cell) else ""
    return [*row, str(len(result.seeds))]


def _table_head(results: SweepResults, columns: list[str]) -> list[str]:
    fields = list(results.sweep.definition.grid)
    heading = [*fields, "seeds", *columns]
    return [
        "| " + " | ".join(heading) + " |",
        "|" + "---|" * len(fields) + "---:|" * (len(heading) - len(fields)),
    ]


def scores_table(results: SweepResults, name: str) -> list[str]:
    """A row per cell that scored test set `name`: each metric's mean ± deviation over
    the seeds and its comparison with the baseline."""
    columns = []
    for metric in METRICS:
        columns += [metric.title, f"Δ {metric.title} [95% CI]", "p (Holm)", "wins"]
    lines = _table_head(results, columns)
    for result in results.cells:
        if name not in result.scores:
            continue
        row = _cell_columns(results, result)
        for metric in METRICS:
            spread = result.spread(name, metric.key)
            compared = result.comparisons.get(name, {}).get(metric.key)
            row += [_spread(spread), *_comparison(results, result, compared)]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _spread(spread: Spread | None) -> str:
    if spread is None:
        return ""
    return f"{spread.mean:.2f} ± {'-' if spread.std is None else f'{spread.std:.2f}'}"


def _comparison(
    results: SweepResults, result: CellResult, compared: Comparison | None
) -> list[str]:
    """Δ [CI], p (Holm) with its mark, wins: the columns of one metric's comparison."""
    if results.sweep.baseline.holds(result.cell):
        return ["baseline", "", ""]
    if compared is None:
        return ["-", "-", "-"]
    mark = " *" if compared.significant else "" if compared.decidable else " †"
    mark += " ‡" if apart_in_hardware(results, result) else ""
    return [
        f"{compared.difference:+.2f} [{compared.low:+.2f}, {compared.high:+.2f}]",
        f"{compared.p:.3f} ({compared.p_holm:.3f}){mark}",
        f"{compared.wins}/{compared.paired}",
    ]


def apart_in_hardware(results: SweepResults, result: CellResult) -> bool:
    """Whether a seed's run of `result` and its baseline's trained on different kinds of
    machine (both recorded in meta.json): their pairing is not the same arithmetic."""
    baseline = results.baseline_of(result)
    if baseline is None:
        return False
    pairs = [(run, baseline.runs.get(seed)) for seed, run in result.runs.items()]
    return any(b and run.machines and b.machines and run.machines != b.machines for run, b in pairs)


def how_to_read(results: SweepResults) -> str:
    compared = [c for r in results.cells for by in r.comparisons.values() for c in by.values()]
    family = len(compared) // len(METRICS)
    titles = ", ".join(m.title for m in METRICS)
    lower = ", ".join(m.title for m in METRICS if not m.higher_is_better)
    return (
        f"{titles} (sacrebleu; {lower}: lower is better) of each run's test translations: "
        "mean ± sample standard deviation over the cell's seeds (- with one seed). "
        f"Δ: the cell's mean minus {_baseline_of_cell(results)}, with its 95% confidence "
        "interval. p: two-sided, from a t-test whose variance counts both the seeds' spread "
        "and the test sentences that both sides share (docs/sweeps.md); in brackets, "
        f"adjusted by Holm over the {family} comparisons with the baseline in this report on "
        f"that metric; * marks an adjusted p below {ALPHA}. † marks a comparison with fewer "
        f"than {MIN_SEEDS} seeds on a side, too few to decide: it is called neither way. "
        "wins: the seeds in which the cell beats the "
        "baseline's run of the same seed, of the seeds both finished."
        + (
            " ‡ marks a comparison in which a seed's run and the baseline's trained on "
            "different kinds of machine (meta.json)."
            if any(apart_in_hardware(results, r) for r in results.cells)
            else ""
        )
    )


def _baseline_of_cell(results: SweepResults) -> str:
    baseline = results.sweep.baseline
    if not baseline.within:
        return "the baseline's"
    return f"its baseline's (`{baseline.key}` at the cell's {', '.join(baseline.within)})"


def ranking(results: SweepResults) -> str:
    """Whether the cells rank alike, by the first metric's means, on every test set."""
    metric = METRICS[0]
    if len(results.test_sets) == 1:
        return (
            f"One test set: whether the ranking by {metric.title} holds on other sentences "
            "cannot be checked here."
        )
    orders = {}
    for name in results.test_sets:
        cells = [c for c in results.cells if name in c.scores]
        ranked = sorted(cells, key=lambda c: -c.spread(name, metric.key).mean)
        orders[name] = " > ".join(c.cell.title for c in ranked)
    if len(set(orders.values())) == 1:
        return f"The ranking by mean {metric.title} is the same on all {len(orders)} test sets."
    shown = "; ".join(f"{name}: {order}" for name, order in orders.items())
    return f"The ranking by mean {metric.title} differs between the test sets: {shown}."


def training_table(results: SweepResults) -> list[str]:
    last = [f"{name} BLEU, last checkpoint" for name in results.test_sets]
    lines = _table_head(results, [*last, *(_HEADINGS[k] for k in STATISTICS)])
    for result in results.cells:
        row = _cell_columns(results, result)
        row += [_spread(result.last_bleu.get(name)) or "-" for name in results.test_sets]
        row += [_statistic(k, result.statistics[k].mean) for k in STATISTICS]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def machines_note(results: SweepResults) -> list[str]:
    """The kinds of machine the finished runs trained on, where their meta.json says."""
    kinds = Counter(
        " then ".join(run.machines) or "not recorded"
        for result in results.cells
        for run in result.runs.values()
    )
    if set(kinds) <= {"not recorded"}:
        return []
    listed = "; ".join(f"{kind}: {count}" for kind, count in kinds.most_common())
    return [
        f"Machines, runs each (meta.json): {listed}. A run repeats float for float (the same "
        "commit, seed and threads) only on the kind of machine it trained on.",
        "",
    ]


def _statistic(name: str, value: float) -> str:
    return f"{value:.2f}" if name == "valid_ppl" else f"{value:,.0f}"
