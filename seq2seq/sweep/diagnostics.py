"""The attention diagnostics of a sweep's report: per cell, curves over updates of the
diagnostics in CURVES (mean and std over seeds) and a table of every diagnostic at the
tested (best) checkpoint, read from each run's summary.json.

A run's value of a diagnostic at a validation is its mean over the model's
cross-attention sites (queries from the target, keys from the source: the RNN's
attention, each Transformer decoder layer's cross-attention); summary.json keeps every
site and head.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from seq2seq.attention.diagnostics import DIAGNOSTICS
from seq2seq.plots import band_panels_figure, figure_png
from seq2seq.sweep.results import CellResult, SweepResults

CURVES = {  # diagnostic -> its panel in attention-diagnostics.png
    "entropy_norm": "normalised entropy (1 = uniform)",
    "energy_std": "energy std over keys",
    "sink_mass": "sink mass (weight on source EOS)",
}
CHART = "attention-diagnostics.png"


def cross_attention(sites: dict[str, dict]) -> dict[str, float]:
    """Each diagnostic and learned scale averaged over the cross-attention sites."""
    values: dict[str, list[float]] = defaultdict(list)
    for entry in sites.values():
        if (entry["queries"], entry["keys"]) == ("target", "source"):
            for name, value in entry["mean"].items():
                values[name].append(value)
    return {name: statistics.fmean(found) for name, found in values.items()}


def _runs(result: CellResult) -> list[dict]:
    """Each seed's summary.json."""
    return [json.loads(run.root.summary.read_text("utf-8")) for run in result.runs.values()]


def _by_step(summary: dict) -> dict[int, dict[str, float]]:
    return {
        point["step"]: cross_attention(point["attention"])
        for point in summary["validations"]
        if point.get("attention")
    }


def _spread(values: list[float]) -> tuple[float, float]:
    """Mean and sample std (0 for one value) of the seeds' values."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def write_diagnostics(results: SweepResults, out: Path) -> str:
    """Write out/CHART where there are curves to draw; the report's markdown section (the
    table and the chart), or "" where no run measured attention."""
    chart = _chart(results)
    if chart is not None:
        (out / CHART).write_bytes(chart)
    lines = _table(results)
    if chart is not None:
        lines += [f"![attention diagnostics over updates]({CHART})", ""]
    return "\n".join(lines)


def _chart(results: SweepResults) -> bytes | None:
    """The PNG of the CURVES per cell over updates; None where no run measured any."""
    panels: dict[str, dict] = {title: {} for title in CURVES.values()}
    for result in results.cells:
        steps: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for summary in _runs(result):
            for step, values in _by_step(summary).items():
                for name in CURVES:
                    if name in values and math.isfinite(values[name]):
                        steps[step][name].append(values[name])
        for name, title in CURVES.items():
            points = [(s, _spread(v[name])) for s, v in sorted(steps.items()) if v[name]]
            if points:
                xs = [s for s, _ in points]
                panels[title][result.cell.title] = (
                    xs, [m for _, (m, _) in points], [d for _, (_, d) in points]
                )  # fmt: skip
    if not any(panels.values()):
        return None
    return figure_png(band_panels_figure(panels, "update"))


def _table(results: SweepResults) -> list[str]:
    """The table at the tested checkpoint: per cell, each diagnostic's mean ± std over the
    seeds at their best step; [] where no run measured any."""
    rows = []
    names: list[str] = list(DIAGNOSTICS)
    for result in results.cells:
        at_best = []
        for summary in _runs(result):
            found = _by_step(summary).get(summary["best_step"])
            if found is not None:
                at_best.append(found)
        if not at_best:
            continue
        names = list(dict.fromkeys([*names, *(n for v in at_best for n in v)]))  # + scales
        rows.append((result.cell.title, at_best))
    if not rows:
        return []
    lines = [
        "## Attention diagnostics at the tested checkpoint",
        "",
        "Each diagnostic (docs/attention.md) at the validation of the best checkpoint (the one "
        "that translated the test sets), "
        "averaged over the cross-attention modules and heads: mean ± std over the seeds "
        "(- where the type has none).",
        "",
        "| cell | seeds | " + " | ".join(names) + " |",
        "|---|---:|" + "---:|" * len(names),
    ]
    for title, at_best in rows:
        cells = [_cell([v[n] for v in at_best if n in v]) for n in names]
        lines.append(f"| {title} | {len(at_best)} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    mean, std = _spread(values)
    return f"{mean:.3g} ± {std:.2g}" if len(values) > 1 else f"{mean:.3g}"
