"""Figures: attention heatmaps (target pieces down, source pieces across) and sweep charts."""

from __future__ import annotations

import io
from collections.abc import Iterable
from types import ModuleType
from typing import TYPE_CHECKING

from torch import Tensor

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage


def pyplot() -> ModuleType:
    """matplotlib's pyplot, drawing to files only (no display is needed or assumed);
    imported at the first figure, not with this module: it is most of a second of the
    start of every command that might draw one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


def attention_figure(weights: Tensor, src_pieces: list[str], tgt_pieces: list[str]) -> Figure:
    """A heatmap of `weights` (T, S), or (T, H, S) averaged over the H heads."""
    # Constrained layout is computed as the figure is drawn: no extra drawing to lay it out.
    size = _heatmap_size(src_pieces, tgt_pieces)
    figure, axes = pyplot().subplots(figsize=size, layout="constrained")
    image = draw_attention(axes, weights, src_pieces, tgt_pieces)
    figure.colorbar(image, ax=axes, fraction=0.04)
    return figure


def attention_grid_figure(
    maps: list[tuple[str, Tensor, list[str], list[str]]], columns: int = 3
) -> Figure:
    """Titled heatmaps side by side, `columns` to a row: (title, weights, source pieces,
    target pieces) each, e.g. one sentence under every cell of a sweep."""
    columns = max(1, min(columns, len(maps)))
    rows = -(-len(maps) // columns)
    width = max(_heatmap_size(src, tgt)[0] for _, _, src, tgt in maps)
    height = max(_heatmap_size(src, tgt)[1] for _, _, src, tgt in maps) + 0.4
    figure, grid = pyplot().subplots(
        rows, columns, figsize=(width * columns, height * rows), squeeze=False, layout="constrained"
    )
    for axes, (title, weights, src, tgt) in zip(grid.flat, maps, strict=False):
        image = draw_attention(axes, weights, src, tgt)
        axes.set_title(title if not axes.get_title() else f"{title} ({axes.get_title()})")
    for axes in grid.flat[len(maps) :]:
        axes.axis("off")
    figure.colorbar(image, ax=grid.ravel().tolist(), shrink=0.6)
    return figure


def draw_attention(
    axes: Axes, weights: Tensor, src_pieces: list[str], tgt_pieces: list[str]
) -> AxesImage:
    """Draw the heatmap of `weights` (T, S), or (T, H, S) averaged over the H heads."""
    heads = weights.size(1) if weights.dim() == 3 else 1
    matrix = weights.float().mean(1) if weights.dim() == 3 else weights.float()
    if matrix.shape != (len(tgt_pieces), len(src_pieces)):
        raise ValueError(
            f"weights {tuple(matrix.shape)} do not match {len(tgt_pieces)} target x "
            f"{len(src_pieces)} source pieces"
        )
    image = axes.imshow(matrix.numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    axes.set_xticks(range(len(src_pieces)), src_pieces, rotation=90, fontsize=8)
    axes.set_yticks(range(len(tgt_pieces)), tgt_pieces, fontsize=8)
    axes.set_xlabel("source")
    axes.set_ylabel("target")
    if heads > 1:
        axes.set_title(f"mean over {heads} heads", fontsize=9)
    return image


def _heatmap_size(src_pieces: list[str], tgt_pieces: list[str]) -> tuple[float, float]:
    cell = 0.32  # inches per piece
    return max(4.0, 1.5 + cell * len(src_pieces)), max(3.0, 1.2 + cell * len(tgt_pieces))


def bar_figure(
    labels: list[str], series: dict[str, tuple[list[float], list[float]]], ylabel: str
) -> Figure:
    """Grouped bars with error bars: a group per label, a bar per series (name -> means,
    errors), e.g. a sweep's test BLEU per cell and test set, +- the std over seeds."""
    width = 0.8 / max(len(series), 1)
    figure, axes = pyplot().subplots(figsize=(max(4.0, 1.0 + 0.9 * len(labels)), 4.0))
    for i, (name, (means, errors)) in enumerate(series.items()):
        offsets = [x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))]
        bars = {"yerr": errors, "capsize": 4} if any(errors) else {}  # no caps on 0 bars
        axes.bar(offsets, means, width, label=name, **bars)
    axes.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    axes.set_ylabel(ylabel)
    if len(series) > 1:
        axes.legend()
    figure.tight_layout()
    return figure


# A line's style per name: matplotlib's 10 colours, then the same colours dashed and
# dotted, so that a chart of 11 attention types draws no two alike.
LINE_STYLES = ("-", "--", ":")


def line_styles(names: Iterable[str]) -> dict[str, dict[str, str]]:
    """Each name's colour and line style, in order, distinct for up to 30 names."""
    return {
        name: {"color": f"C{i % 10}", "linestyle": LINE_STYLES[i // 10 % len(LINE_STYLES)]}
        for i, name in enumerate(names)
    }


def curves_figure(
    curves: dict[str, tuple[list[int], list[float]]], xlabel: str, ylabel: str
) -> Figure:
    """A line per name (name -> x values, y values), e.g. validation BLEU against step."""
    figure, axes = pyplot().subplots(figsize=(7.0, 4.5))
    styles = line_styles(curves)
    for name, (xs, ys) in curves.items():
        axes.plot(xs, ys, marker=".", label=name, **styles[name])
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    return figure


Band = tuple[list[int], list[float], list[float]]  # x values, means, spreads (e.g. std)


def band_panels_figure(panels: dict[str, dict[str, Band]], xlabel: str) -> Figure:
    """A panel per title (title -> name -> band) side by side, a line per name with a
    shaded band of +- its spread, e.g. a diagnostic's mean and std over seeds per step.
    A name has one colour in every panel, also in panels that lack some names; one legend
    beside the panels names them all."""
    styles = line_styles(dict.fromkeys(name for bands in panels.values() for name in bands))
    figure, grid = pyplot().subplots(
        1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False, layout="constrained"
    )
    for axes, (title, bands) in zip(grid.flat, panels.items(), strict=True):
        for name, (xs, means, spreads) in bands.items():
            axes.plot(xs, means, marker=".", label=name, **styles[name])
            low = [m - s for m, s in zip(means, spreads, strict=True)]
            high = [m + s for m, s in zip(means, spreads, strict=True)]
            axes.fill_between(xs, low, high, color=styles[name]["color"], alpha=0.2, linewidth=0)
        axes.set_title(title, fontsize=10)
        axes.set_xlabel(xlabel)
        axes.grid(alpha=0.3)
    handles = {line.get_label(): line for axes in grid.flat for line in axes.lines}
    figure.legend(handles.values(), handles.keys(), loc="outside right upper", fontsize=8)
    return figure


Line = tuple[list[int], list[float]]  # x values, y values


def line_grid_figure(
    rows: dict[str, dict[str, dict[str, Line]]], xlabel: str, marks: dict[str, float]
) -> Figure:
    """Small multiples: a row of panels per row title and a column per column title (row
    -> column -> name -> line), a line per name with one colour per name throughout, the
    panels of a column on one y scale; `marks` (column -> y) draws a dashed line across
    that column's panels, e.g. a threshold."""
    columns = list(dict.fromkeys(column for panels in rows.values() for column in panels))
    styles = line_styles(
        dict.fromkeys(n for panels in rows.values() for ls in panels.values() for n in ls)
    )
    figure, grid = pyplot().subplots(
        len(rows),
        len(columns),
        figsize=(4.2 * len(columns), 0.8 + 1.9 * len(rows)),
        squeeze=False,
        sharex=True,
        sharey="col",
        layout="constrained",
    )
    for axes_row, (title, panels) in zip(grid, rows.items(), strict=True):
        axes_row[0].set_ylabel(title, fontsize=9)
        for axes, column in zip(axes_row, columns, strict=True):
            for name, (xs, ys) in panels.get(column, {}).items():
                axes.plot(xs, ys, marker=".", markersize=3, label=name, **styles[name])
            if column in marks:
                axes.axhline(marks[column], color="grey", linestyle="--", linewidth=0.8)
            axes.grid(alpha=0.3)
    for axes, column in zip(grid[0], columns, strict=True):
        axes.set_title(column, fontsize=10)
    for axes in grid[-1]:
        axes.set_xlabel(xlabel)
    handles = {line.get_label(): line for axes in grid.flat for line in axes.lines}
    drawn = {label: line for label, line in handles.items() if not label.startswith("_")}
    figure.legend(drawn.values(), drawn.keys(), loc="outside right upper", fontsize=8)
    return figure


def figure_png(figure: Figure) -> bytes:
    """The figure as PNG bytes; the figure is closed (matplotlib keeps open ones alive)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    pyplot().close(figure)
    return buffer.getvalue()
