"""A sweep's report, DIR/report/: results.md (its tables: sweep/reporting/tables.py; a continued
sweep's budgets: sweep/reporting/budgets.py), results.csv, bleu.png, curves.png,
length-TESTSET.png, attention.png, attention-diagnostics.png and attention-runs.png
(sweep/reporting/diagnostics.py) and TensorBoard's HParams view (tensorboard/), from whatever has
finished.

The report is written into a temporary directory and renamed into place, so a reader (or
a shard finishing at the same time) never sees half of one.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import torch

from seq2seq.errors import UserError
from seq2seq.files import publish_directory
from seq2seq.metrics import HEADLINE, METRICS, length_buckets
from seq2seq.plots import (
    attention_grid_figure,
    bar_figure,
    curves_figure,
    figure_png,
)
from seq2seq.significance import Comparison
from seq2seq.sweep.directory import SweepDir
from seq2seq.sweep.kept_attention import save_best_attention
from seq2seq.sweep.reporting.budgets import budget_tables
from seq2seq.sweep.reporting.diagnostics import write_diagnostics
from seq2seq.sweep.reporting.results import (
    LENGTH_EDGES,
    STATISTICS,
    CellResult,
    Spread,
    SweepResults,
    collect,
)
from seq2seq.sweep.reporting.tables import (
    TRAINING_NOTE,
    bucket_bleu,
    how_to_read,
    length_table,
    machines_note,
    ranking,
    scores_table,
    training_table,
)
from seq2seq.sweep.spec import format_value


def write_report(directory: SweepDir) -> Path:
    """Write the report of the sweep in `directory`; returns the path of results.md.
    Unfinished runs are listed in it and on stderr."""
    report = directory.report
    if report.exists() and not report.is_dir():  # a user's file: never replaced unasked
        raise UserError(f"{report} is a file, not a sweep report; move it away and run again")
    results = collect(directory)
    publish_directory(report, lambda tmp: _write(results, tmp), replace=True)
    total = len(results.sweep.runs)
    print(
        f"sweep {results.sweep.name}: {_finished(results)} of {total} runs finished",
        file=sys.stderr,
    )
    for run, state in results.unfinished:
        print(f"  {run.name}: {state.value}", file=sys.stderr)
    for run, problem in results.damaged:
        print(f"  {run.name}: damaged: {problem}; the sweep command redoes it", file=sys.stderr)
    print(f"report: {directory.report}/results.md", file=sys.stderr)
    return directory.report / "results.md"


def _write(results: SweepResults, out: Path) -> None:
    out.mkdir(parents=True)
    charts = _charts(results) if results.cells else {}
    (out / "results.csv").write_text(results_csv(results), encoding="utf-8")
    markdown = results_markdown(results, list(charts)) + write_diagnostics(results, out)
    (out / "results.md").write_text(markdown, encoding="utf-8")
    for name, png in charts.items():
        (out / name).write_bytes(png)
    if results.cells:
        _tensorboard(results, out / "tensorboard")


def _charts(results: SweepResults) -> dict[str, bytes]:
    """File name -> PNG of each chart there is something to draw for."""
    cells = results.cells
    labels = [c.cell.title for c in cells]
    unscored = Spread(0.0, None)  # a test set that a cell's runs did not score: no bar
    series = {}
    for name in results.test_sets:
        spreads = [c.spread(name, HEADLINE.key) or unscored for c in cells]
        series[name] = ([s.mean for s in spreads], [s.std or 0.0 for s in spreads])
    figures = {"bleu.png": bar_figure(labels, series, "test BLEU (error bars: std over seeds)")}
    curves = {c.cell.title: ([s for s, _ in c.curve], [b for _, b in c.curve]) for c in cells}
    figures["curves.png"] = curves_figure(curves, "step", "validation BLEU (mean over seeds)")
    for name in results.test_sets:
        by_bucket = {
            bucket: ([bucket_bleu(c, name, i) or 0.0 for c in cells], [0.0] * len(cells))
            for i, bucket in enumerate(length_buckets(LENGTH_EDGES))
        }
        figures[f"length-{name}.png"] = bar_figure(
            labels, by_bucket, f"{name} BLEU by source length (words)"
        )
    maps = [found for c in cells if (found := _attention(results, c)) is not None]
    if maps:
        figures["attention.png"] = attention_grid_figure(maps)
    return {name: figure_png(figure) for name, figure in figures.items()}


def results_markdown(results: SweepResults, charts: list[str] | None = None) -> str:
    """The report's text; `charts` names the PNG files beside it to show (see `_charts`)."""
    sweep = results.sweep
    definition = sweep.definition
    fixed = ", ".join(f"{k}={format_value(v)}" for k, v in definition.set.items())
    rules = "; ".join(results.checkpoint_rules) or "-"
    lines = [
        f"# Sweep {sweep.name}",
        "",
        f"Base config `{definition.base}`"
        + (f" with {fixed}" if fixed else "")
        + "; grid: "
        + " x ".join(f"{k} ({len(v)})" for k, v in definition.grid.items())
        + f"; seeds {', '.join(map(str, definition.seeds))}; baseline {sweep.baseline.text}.",
        f"{_finished(results)} of {len(sweep.runs)} runs finished. Checkpoint rule "
        f"(`train.test_checkpoint`), the checkpoint of each run that translated the test "
        f"sets: {rules}.",
        "",
    ]
    if results.cells and not any(map(results.baseline_of, results.cells)):
        lines += [
            f"The baseline {sweep.baseline.text} has no finished run yet: no comparisons.",
            "",
        ]
    for name in results.test_sets:
        lines += [f"## {name}", "", *scores_table(results, name), "", how_to_read(results), ""]
    if results.test_sets:
        lines += [ranking(results), ""]
    lines += budget_tables(results)
    lines += ["## Training", "", *training_table(results), "", TRAINING_NOTE, ""]
    lines += machines_note(results)
    for name in results.test_sets:
        lines += length_table(results, name)
    if charts:
        lines += [f"![{_chart_caption(chart)}]({chart})" for chart in charts] + [""]
        if "attention.png" not in charts:
            lines += ["No attention heatmaps: no cell has a best checkpoint here.", ""]
    lines += _damaged(results)
    if results.unfinished:
        lines += ["## Not finished", ""]
        lines += [f"- `{run.name}`: {state.value}" for run, state in results.unfinished]
        lines += ["", "Run the sweep command again to finish them (interrupted runs resume).", ""]
    return "\n".join(lines)


def _finished(results: SweepResults) -> int:
    return len(results.sweep.runs) - len(results.unfinished) - len(results.damaged)


def _damaged(results: SweepResults) -> list[str]:
    if not results.damaged:
        return []
    lines = ["## Damaged", ""]
    lines += [f"- `{run.name}`: {problem}" for run, problem in results.damaged]
    return [
        *lines,
        "",
        "Left out of the tables above. Run the sweep command again to redo them; if that "
        "fails too, delete the run directories named (runs/NAME) and run it again.",
        "",
    ]


_CAPTIONS = {"bleu.png": "test BLEU", "curves.png": "validation BLEU", "attention.png": "attention"}


def _chart_caption(chart: str) -> str:
    """Alt text of a chart of `_charts`: length-NAME.png is test set NAME by length."""
    return _CAPTIONS.get(chart, f"{Path(chart).stem.removeprefix('length-')} BLEU by length")


def results_csv(results: SweepResults) -> str:
    fields = list(results.sweep.definition.grid)
    heading = [*fields, "baseline", "seeds"]
    for name in results.test_sets:
        for metric in METRICS:
            heading += [f"{name}_{metric.key}_{x}" for x in _CSV_COLUMNS]
    heading += list(STATISTICS)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(heading)
    for result in results.cells:
        row: list[Any] = [format_value(v) for _, v in result.cell.values]
        row += [results.sweep.baseline.holds(result.cell), " ".join(map(str, result.seeds))]
        for name in results.test_sets:
            for metric in METRICS:
                spread = result.spread(name, metric.key)
                compared = result.comparisons.get(name, {}).get(metric.key)
                row += _csv_values(spread, compared)
        row += [round(result.statistics[k].mean, 2) for k in STATISTICS]
        writer.writerow(row)
    return buffer.getvalue()


_CSV_COLUMNS = ("mean", "std", "diff", "low", "high", "p", "p_holm", "wins")


def _csv_values(spread: Spread | None, compared: Comparison | None) -> list[Any]:
    """The _CSV_COLUMNS of one metric of one test set; empty where there is none."""
    values: list[Any] = [None] * len(_CSV_COLUMNS)
    if spread is not None:
        values[:2] = [spread.mean, spread.std]
    if compared is not None:
        values[2:] = [compared.difference, compared.low, compared.high, compared.p]
        values[6:] = [compared.p_holm, compared.wins]
    return ["" if v is None else round(v, 4) for v in values]


def _attention(results: SweepResults, result: CellResult) -> tuple | None:
    """The cell's heatmap: the first non-empty validation sentence, translated greedily by
    the best checkpoint of the cell's first seed that has one (the same sentence for every
    cell). It is kept in that run's best-attention.json, which is read once the checkpoints
    are gone, so a rebuilt report draws the same picture; None where no seed has either."""
    for seed in result.seeds:
        run = result.runs[seed].root
        save_best_attention(run, results.sweep.run(result.cell, seed).config)
        if run.best_attention.is_file():
            saved = json.loads(run.best_attention.read_text(encoding="utf-8"))
            weights = torch.tensor(saved["weights"])  # float32 again: the weights drawn before
            return result.cell.title, weights, saved["source"], saved["target"]
    return None


def _tensorboard(results: SweepResults, directory: Path) -> None:
    """A run per cell in TensorBoard's HParams view: the grid values and the means."""
    from torch.utils.tensorboard import SummaryWriter  # slow to import: only here

    with SummaryWriter(str(directory)) as writer:
        for result in results.cells:
            hparams = {
                field: value if isinstance(value, bool | int | float | str) else format_value(value)
                for field, value in result.cell.values
            }
            metrics = {
                f"test/{name}/{metric.key}": float(scored[metric.key].observed.mean())
                for name, scored in result.scores.items()
                for metric in METRICS
            }
            metrics |= {f"train/{k}": result.statistics[k].mean for k in STATISTICS}
            writer.add_hparams(
                hparams | {"seeds": len(result.seeds)}, metrics, run_name=result.cell.key
            )
