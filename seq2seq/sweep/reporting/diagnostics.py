"""The attention diagnostics of a sweep's report: per cell, curves over updates of the
diagnostics in CURVES (mean and std over seeds) and every run's RUN_CURVES, a table of
every diagnostic at the tested (best) checkpoint, and the runs whose attention locked
onto the source's EOS (sink mass >= LOCKED) and at which validations, read from each
run's summary.json.

The curves start at update 0 where a run's initial weights were measured: the report
measures them once on the validation set (the run's tokenizer and last checkpoint, for
its corpus's length ratio, must be there) and keeps them in the run's init-attention.json,
so that a sweep directory kept without checkpoints rebuilds the same report.

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

from seq2seq.attention.diagnostics import DIAGNOSTICS, LOCKED
from seq2seq.plots import band_panels_figure, figure_png, line_grid_figure
from seq2seq.sweep.kept_attention import initial_sites
from seq2seq.sweep.reporting.results import CellResult, SweepResults

CURVES = {  # diagnostic -> its panel in attention-diagnostics.png
    "entropy_norm": "normalised entropy (1 = uniform)",
    "energy_std": "energy std over keys",
    "sink_mass": "sink mass (weight on source EOS)",
    "temperature": "temperature g (the types that have one)",
}
CHART = "attention-diagnostics.png"
# Every run's curves, a row per cell: its normalised entropy (the mean of its
# cross-attention modules) and its sink mass (the largest module's, as locks count it).
RUN_CURVES = ("normalised entropy", "sink mass (largest module)")
RUNS_CHART = "attention-runs.png"
Points = dict[int, dict[int, dict[str, float]]]  # seed -> step -> cross-attention diagnostics
# The key of the validation of the checkpoint that translated a seed's test sets among its
# steps (no step is negative).
TESTED = -1
TABLES = (  # (step, where, what the table says)
    (
        TESTED,
        "at the tested checkpoint",
        "Each diagnostic (docs/attention.md) at the validation of the checkpoint that "
        "translated the test sets (`train.test_checkpoint`: the best or the last; none for "
        "an average of checkpoints), averaged over the cross-attention modules and heads: "
        "mean ± std over the seeds (- where the type has none).",
    ),
    (
        0,
        "at the initial weights",
        "The same of each run's initial weights (update 0, its seed's draw; see "
        "`--checkpoint init`), measured on the validation set by the report.",
    ),
)


def cross_attention(sites: dict[str, dict]) -> dict[str, float]:
    """Each diagnostic and learned scale averaged over the cross-attention sites."""
    values: dict[str, list[float]] = defaultdict(list)
    for entry in sites.values():
        if (entry["queries"], entry["keys"]) == ("target", "source"):
            for name, value in entry["mean"].items():
                values[name].append(value)
    return {name: statistics.fmean(found) for name, found in values.items()}


def _runs(result: CellResult) -> dict[int, dict]:
    """Each seed's summary.json."""
    return {
        seed: json.loads(run.root.summary.read_text("utf-8"))
        for seed, run in sorted(result.runs.items())
    }


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
    """Write out/CHART and out/RUNS_CHART where there are curves to draw; the report's
    markdown section (the tables and the charts), or "" where no run measured attention."""
    summaries = {result.cell.title: _runs(result) for result in results.cells}
    points = {result.cell.title: _points(results, result, summaries) for result in results.cells}
    sinks = {  # cell -> seed -> step -> the largest sink mass of its modules
        cell: {seed: _largest_sink_mass(summary) for seed, summary in runs.items()}
        for cell, runs in summaries.items()
    }
    charts = {CHART: _chart(points), RUNS_CHART: _runs_chart(points, sinks)}
    for name, chart in charts.items():
        if chart is not None:
            (out / name).write_bytes(chart)
    lines = [line for table in TABLES for line in _table(points, *table)]
    if charts[CHART] is not None:
        lines += [f"![attention diagnostics over updates]({CHART})", ""]
    if charts[RUNS_CHART] is not None:
        lines += [
            "Every run at each validation: its normalised entropy (the mean of its "
            "cross-attention modules) and its sink mass (its largest module's, as the locks "
            "below count it), a row per cell and a line per seed; dashed: the sink mass of "
            f"{LOCKED:g} from which a run counts as locked.",
            "",
            f"![every run's attention over updates]({RUNS_CHART})",
            "",
        ]
    return "\n".join([*lines, *_locks(sinks)])


def _points(results: SweepResults, result: CellResult, summaries: dict) -> Points:
    """Each seed's diagnostics by step: the validations', and step 0 where the initial
    weights were measured; the step of the seed's tested checkpoint is `TESTED` in it."""
    found = {}
    for seed, summary in summaries[result.cell.title].items():
        cfg = results.sweep.run(result.cell, seed).config
        initial = initial_sites(result.runs[seed].root, cfg)
        validations = _by_step(summary)
        tested = {
            "best": summary["best_step"],
            "last": max(validations, default=None),
        }.get(cfg.train.test_checkpoint)
        by_step = ({0: cross_attention(initial)} if initial else {}) | validations
        point = by_step.get(tested)
        found[seed] = by_step | ({TESTED: point} if point is not None else {})
    return found


def _chart(points: dict[str, Points]) -> bytes | None:
    """The PNG of the CURVES per cell over updates; None where no run measured any."""
    panels: dict[str, dict] = {title: {} for title in CURVES.values()}
    for cell, seeds in points.items():
        steps: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for by_step in seeds.values():
            for step, values in by_step.items():
                for name in CURVES:
                    if step != TESTED and name in values and math.isfinite(values[name]):
                        steps[step][name].append(values[name])
        for name, title in CURVES.items():
            found = [(s, _spread(v[name])) for s, v in sorted(steps.items()) if v[name]]
            if found:
                xs = [s for s, _ in found]
                panels[title][cell] = (xs, [m for _, (m, _) in found], [d for _, (_, d) in found])
    drawn = {title: bands for title, bands in panels.items() if bands}
    return figure_png(band_panels_figure(drawn, "update")) if drawn else None


def _runs_chart(
    points: dict[str, Points], sinks: dict[str, dict[int, dict[int, float]]]
) -> bytes | None:
    """The PNG of RUN_CURVES of every run at its validations, a row per cell and a line
    per seed; None where no run measured them."""
    rows = {}
    for cell, seeds in points.items():
        entropy = {
            seed: _at_validations(by_step, "entropy_norm") for seed, by_step in seeds.items()
        }
        panels = {
            title: {f"seed {seed}": (list(c), list(c.values())) for seed, c in curves.items() if c}
            for title, curves in zip(RUN_CURVES, (entropy, sinks[cell]), strict=True)
        }
        if any(panels.values()):
            rows[cell] = panels
    if not rows:
        return None
    return figure_png(line_grid_figure(rows, "update", {RUN_CURVES[1]: LOCKED}))


def _at_validations(by_step: dict[int, dict[str, float]], name: str) -> dict[int, float]:
    """A run's diagnostic at each validation (not the initial weights, 0, nor TESTED)."""
    return {
        step: values[name]
        for step, values in by_step.items()
        if step > 0 and math.isfinite(values.get(name, math.nan))
    }


def _table(points: dict[str, Points], step: int, where: str, intro: str) -> list[str]:
    """Per cell, each diagnostic's mean ± std over the seeds at `step` (TESTED: each seed's
    tested checkpoint), a column per diagnostic some cell has (the learned scales last);
    [] where no run has that point."""
    rows = []
    for cell, seeds in points.items():
        found = [by_step[step] for by_step in seeds.values() if step in by_step]
        if found:
            rows.append((cell, found))
    if not rows:
        return []
    measured = {name for _, found in rows for values in found for name in values}
    names = [n for n in DIAGNOSTICS if n in measured] + sorted(measured - set(DIAGNOSTICS))
    lines = [
        f"## Attention diagnostics {where}",
        "",
        intro,
        "",
        "| cell | seeds | " + " | ".join(names) + " |",
        "|---|---:|" + "---:|" * len(names),
    ]
    for cell, found in rows:
        cells = [_cell([v[n] for v in found if n in v]) for n in names]
        lines.append(f"| {cell} | {len(found)} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    mean, std = _spread(values)
    return f"{mean:.3g} ± {std:.2g}" if len(values) > 1 else f"{mean:.3g}"


def _locks(sinks: dict[str, dict[int, dict[int, float]]]) -> list[str]:
    """Per cell, the runs in which a cross-attention module's sink mass reached LOCKED at
    some validation, with those validations and the run's largest sink mass; [] where no
    run measured it. `sinks`: cell -> seed -> step -> the largest sink mass of its modules."""
    measured = {}  # the same, of the runs that measured it
    for cell, runs in sinks.items():
        if with_sinks := {seed: by_step for seed, by_step in runs.items() if by_step}:
            measured[cell] = with_sinks
    if not measured:
        return []
    heading = ["## Attention locked onto the source's end of sentence", ""]
    peak, title, seed = max(
        (max(sinks.values()), title, seed)
        for title, runs in measured.items()
        for seed, sinks in runs.items()
    )
    if peak < LOCKED:
        return [
            *heading,
            f"No cross-attention module of any run put {LOCKED:g} or more of its weight on the "
            f"source's EOS (sink mass) at a validation; the largest: {peak:.2f} ({title}, "
            f"seed {seed}).",
            "",
        ]
    return [
        *heading,
        f"A run is locked at a validation where a cross-attention module puts {LOCKED:g} or "
        "more of its weight on the source's EOS (sink mass, averaged over the target positions "
        "and heads; the largest of the modules). Per cell: the runs locked at some validation, "
        "of those that measured it; for each, the updates of the validations it was locked "
        "at and its largest sink mass.",
        "",
        "| cell | locked runs | when |",
        "|---|---:|---|",
        *(_lock_row(title, runs) for title, runs in measured.items()),
        "",
    ]


def _lock_row(title: str, runs: dict[int, dict[int, float]]) -> str:
    locked = []
    for seed, sinks in runs.items():
        at = [step for step, mass in sinks.items() if mass >= LOCKED]
        if at:
            locked.append(
                f"seed {seed}: {_step_ranges(list(sinks), at)} ({len(at)} of {len(sinks)} "
                f"validations; largest {max(sinks.values()):.2f})"
            )
    return f"| {title} | {len(locked)} of {len(runs)} | {'; '.join(locked)} |"


def _largest_sink_mass(summary: dict) -> dict[int, float]:
    """Validation step -> the largest sink mass of the cross-attention modules (each the
    mean over its heads): a lock in one decoder layer counts, not diluted by the others."""
    found = {}
    for point in summary["validations"]:
        masses = [
            entry["mean"]["sink_mass"]
            for entry in (point.get("attention") or {}).values()
            if (entry["queries"], entry["keys"]) == ("target", "source")
            and math.isfinite(entry["mean"].get("sink_mass", math.nan))
        ]
        if masses:
            found[point["step"]] = max(masses)
    return dict(sorted(found.items()))


def _step_ranges(steps: list[int], chosen: list[int]) -> str:
    """`chosen` of the consecutive validation `steps` as ranges: "250-750, 1,250"."""
    spans: list[list[int]] = []
    for index, step in enumerate(steps):
        if step in chosen:
            if spans and spans[-1][-1] == steps[index - 1]:
                spans[-1].append(step)
            else:
                spans.append([step])
    return ", ".join(
        f"{span[0]:,}" if len(span) == 1 else f"{span[0]:,}-{span[-1]:,}" for span in spans
    )
