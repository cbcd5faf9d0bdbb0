"""A sweep's report, DIR/report/: results.csv, results.md, bleu.png, curves.png,
length-TESTSET.png, attention.png, attention-diagnostics.png (sweep/diagnostics.py) and
TensorBoard's HParams view (tensorboard/), from whatever has finished.

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

from seq2seq.data.corpus import corpus_path, read_lines
from seq2seq.decode.translate import Translator
from seq2seq.evaluate import length_buckets
from seq2seq.files import atomic_write_text, publish_directory
from seq2seq.plots import (
    attention_grid_figure,
    bar_figure,
    curves_figure,
    figure_png,
)
from seq2seq.sweep.diagnostics import write_diagnostics
from seq2seq.sweep.directory import SweepDir
from seq2seq.sweep.results import (
    ALPHA,
    LENGTH_EDGES,
    SAMPLES,
    STATISTICS,
    CellResult,
    Spread,
    SweepResults,
    collect,
)
from seq2seq.sweep.spec import format_value

_HEADINGS = {  # STATISTICS in results.md
    "best_step": "best step",
    "valid_ppl": "valid ppl",
    "train_seconds": "train s",
    "target_tokens_per_s": "tokens/s",
    "parameters": "parameters",
}


def write_report(directory: SweepDir) -> Path:
    """Write the report of the sweep in `directory`; returns the path of results.md.
    Unfinished runs are listed in it and on stderr."""
    results = collect(directory)
    publish_directory(directory.report, lambda tmp: _write(results, tmp), replace=True)
    total = len(results.sweep.runs)
    done = total - len(results.unfinished)
    print(f"sweep {results.sweep.name}: {done} of {total} runs finished", file=sys.stderr)
    for run, state in results.unfinished:
        print(f"  {run.name}: {state.value}", file=sys.stderr)
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
        spreads = [c.scores.get(name, {}).get("bleu", unscored) for c in cells]
        series[name] = ([s.mean for s in spreads], [s.std or 0.0 for s in spreads])
    figures = {"bleu.png": bar_figure(labels, series, "test BLEU (error bars: std over seeds)")}
    curves = {c.cell.title: ([s for s, _ in c.curve], [b for _, b in c.curve]) for c in cells}
    figures["curves.png"] = curves_figure(curves, "step", "validation BLEU (mean over seeds)")
    for name in results.test_sets:
        by_bucket = {
            bucket: ([_bucket_bleu(c, name, i) or 0.0 for c in cells], [0.0] * len(cells))
            for i, bucket in enumerate(length_buckets(LENGTH_EDGES))
        }
        figures[f"length-{name}.png"] = bar_figure(
            labels, by_bucket, f"{name} BLEU by source length (words)"
        )
    maps = [found for c in cells if (found := _attention(results, c)) is not None]
    if maps:
        figures["attention.png"] = attention_grid_figure(maps)
    return {name: figure_png(figure) for name, figure in figures.items()}


def _spread(spread: Spread | None) -> str:
    if spread is None:
        return ""
    return f"{spread.mean:.2f} ± {'-' if spread.std is None else f'{spread.std:.2f}'}"


def _p(result: CellResult, baseline: bool, name: str, metric: str) -> str:
    if baseline:
        return "baseline"
    test = result.significance.get(name)
    if test is None:
        return "-"
    p = getattr(test, f"{metric}_p")
    return f"{p:.3f}{' *' if p < ALPHA else ''}"


def results_markdown(results: SweepResults, charts: list[str] | None = None) -> str:
    """The report's text; `charts` names the PNG files beside it to show (see `_charts`)."""
    sweep = results.sweep
    definition = sweep.definition
    fixed = ", ".join(f"{k}={format_value(v)}" for k, v in definition.set.items())
    lines = [
        f"# Sweep {sweep.name}",
        "",
        f"Base config `{definition.base}`"
        + (f" with {fixed}" if fixed else "")
        + "; grid: "
        + " x ".join(f"{k} ({len(v)})" for k, v in definition.grid.items())
        + f"; seeds {', '.join(map(str, definition.seeds))}; baseline `{sweep.baseline.key}`.",
        f"{len(sweep.runs) - len(results.unfinished)} of {len(sweep.runs)} runs finished.",
        "",
        *_markdown_table(results),
    ]
    if results.cells and results.baseline is None:
        lines += ["", f"The baseline `{sweep.baseline.key}` has no finished run yet: no p-values."]
    lines += ["", _how_to_read(results), ""]
    for name in results.test_sets:
        lines += _length_table(results, name)
    if charts:
        lines += [f"![{_chart_caption(chart)}]({chart})" for chart in charts] + [""]
        if "attention.png" not in charts:
            lines += ["No attention heatmaps: no cell has a best checkpoint here.", ""]
    if results.unfinished:
        lines += ["## Not finished", ""]
        lines += [f"- `{run.name}`: {state.value}" for run, state in results.unfinished]
        lines += ["", "Run the sweep command again to finish them (interrupted runs resume).", ""]
    return "\n".join(lines)


_CAPTIONS = {"bleu.png": "test BLEU", "curves.png": "validation BLEU", "attention.png": "attention"}


def _chart_caption(chart: str) -> str:
    """Alt text of a chart of `_charts`: length-NAME.png is test set NAME by length."""
    return _CAPTIONS.get(chart, f"{Path(chart).stem.removeprefix('length-')} BLEU by length")


def _length_table(results: SweepResults, name: str) -> list[str]:
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
        scores = [_bucket_bleu(result, name, i) for i in range(len(buckets))]
        row = ["-" if b is None else f"{b:.2f}" for b in scores]
        lines.append(f"| {result.cell.title} | " + " | ".join(row) + " |")
    return [*lines, ""]


def _bucket_bleu(result: CellResult, name: str, bucket: int) -> float | None:
    scored = result.by_length.get(name)
    return scored[bucket][1] if scored else None


def _markdown_table(results: SweepResults) -> list[str]:
    """A row per cell: grid values, seeds, each test set's scores with p, statistics."""
    sweep = results.sweep
    fields = list(sweep.definition.grid)
    heading = [*fields, "seeds"]
    for name in results.test_sets:
        heading += [f"{name} BLEU", "p", f"{name} chrF", "p"]
    heading += [_HEADINGS[k] for k in STATISTICS]
    lines = [
        "| " + " | ".join(heading) + " |",
        "|" + "---|" * len(fields) + "---:|" * (len(heading) - len(fields)),
    ]
    for result in results.cells:
        is_baseline = result.cell == sweep.baseline
        row = [format_value(v) for _, v in result.cell.values]
        row[0] += " (baseline)" if is_baseline else ""
        row.append(str(len(result.seeds)))
        for name in results.test_sets:
            scores = result.scores.get(name, {})
            for metric in ("bleu", "chrf"):
                row += [_spread(scores.get(metric)), _p(result, is_baseline, name, metric)]
        row += [_statistic(k, result.statistics[k].mean) for k in STATISTICS]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _statistic(name: str, value: float) -> str:
    return f"{value:.2f}" if name == "valid_ppl" else f"{value:,.0f}"


def _how_to_read(results: SweepResults) -> str:
    signature = next((t.signature for c in results.cells for t in c.significance.values()), None)
    return (
        "BLEU and chrF (sacrebleu) of each test set, translated with each run's best "
        "checkpoint: mean ± sample standard deviation over the finished seeds (- with one "
        f"seed). p: paired bootstrap resampling (sacrebleu, {SAMPLES} resamples) of the cell "
        "against the baseline on the concatenated hypotheses of the seeds finished in both "
        "(seed k paired with the baseline's seed k, the references repeated once per seed); "
        f"* marks p < {ALPHA}."
        + (f" Signature: `{signature}`." if signature else "")
        + " The last columns are means over the seeds (summary.json); valid ppl is the"
        " validation perplexity at the best step."
    )


def results_csv(results: SweepResults) -> str:
    fields = list(results.sweep.definition.grid)
    heading = [*fields, "baseline", "seeds"]
    for name in results.test_sets:
        for metric in ("bleu", "chrf"):
            heading += [f"{name}_{metric}_{x}" for x in ("mean", "std", "p")]
    heading += list(STATISTICS)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(heading)
    for result in results.cells:
        row: list[Any] = [format_value(v) for _, v in result.cell.values]
        row += [result.cell == results.sweep.baseline, " ".join(map(str, result.seeds))]
        for name in results.test_sets:
            scores, test = result.scores.get(name, {}), result.significance.get(name)
            for metric in ("bleu", "chrf"):
                spread = scores.get(metric)
                row += [
                    "" if spread is None else round(spread.mean, 4),
                    "" if spread is None or spread.std is None else round(spread.std, 4),
                    "" if test is None else round(getattr(test, f"{metric}_p"), 4),
                ]
        row += [round(result.statistics[k].mean, 2) for k in STATISTICS]
        writer.writerow(row)
    return buffer.getvalue()


def _attention(results: SweepResults, result: CellResult) -> tuple | None:
    """The cell's heatmap: the first non-empty validation sentence, translated greedily by
    the best checkpoint of the cell's first seed that has one (the same sentence for every
    cell). It is kept in that run's best-attention.json, which is read once the checkpoints
    are gone, so a rebuilt report draws the same picture; None where no seed has either."""
    for seed in result.seeds:
        run = result.runs[seed]
        if not run.best_attention.is_file() and run.checkpoint("best").is_file():
            _save_best_attention(results, result, seed)
        if run.best_attention.is_file():
            saved = json.loads(run.best_attention.read_text(encoding="utf-8"))
            weights = torch.tensor(saved["weights"])  # float32 again: the weights drawn before
            return result.cell.title, weights, saved["source"], saved["target"]
    return None


def _save_best_attention(results: SweepResults, result: CellResult, seed: int) -> None:
    """Translate the heatmap sentence with the run's best checkpoint into best-attention.json;
    nothing where the model finished no translation."""
    cfg = results.sweep.run(result.cell, seed).config
    sources = read_lines(corpus_path(cfg.data.valid, cfg.data.src))
    sentence = next(line for line in sources if line.strip())
    run_dir = result.runs[seed]
    amap = Translator.load(run_dir.root, "best", beam=1).attention_map(sentence)
    if amap is not None:
        saved = {
            "sentence": sentence,
            "translation": amap.translation,
            "source": amap.src_pieces,
            "target": amap.tgt_pieces,
            "weights": amap.weights.tolist(),
        }
        atomic_write_text(run_dir.best_attention, json.dumps(saved) + "\n")


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
                f"test/{name}/{metric}": spread.mean
                for name, scores in result.scores.items()
                for metric, spread in scores.items()
            }
            metrics |= {f"train/{k}": result.statistics[k].mean for k in STATISTICS}
            writer.add_hparams(
                hparams | {"seeds": len(result.seeds)}, metrics, run_name=result.cell.key
            )
