"""Attention heatmaps: target pieces down, source pieces across."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")  # files only: no display is needed or assumed

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from torch import Tensor  # noqa: E402


def attention_figure(weights: Tensor, src_pieces: list[str], tgt_pieces: list[str]) -> Figure:
    """A heatmap of `weights` (T, S), or (T, H, S) averaged over the H heads."""
    heads = weights.size(1) if weights.dim() == 3 else 1
    matrix = weights.float().mean(1) if weights.dim() == 3 else weights.float()
    if matrix.shape != (len(tgt_pieces), len(src_pieces)):
        raise ValueError(
            f"weights {tuple(matrix.shape)} do not match {len(tgt_pieces)} target x "
            f"{len(src_pieces)} source pieces"
        )
    cell = 0.32
    figure, axes = plt.subplots(
        figsize=(max(4.0, 1.5 + cell * len(src_pieces)), max(3.0, 1.2 + cell * len(tgt_pieces)))
    )
    image = axes.imshow(matrix.numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    axes.set_xticks(range(len(src_pieces)), src_pieces, rotation=90, fontsize=8)
    axes.set_yticks(range(len(tgt_pieces)), tgt_pieces, fontsize=8)
    axes.set_xlabel("source")
    axes.set_ylabel("target")
    if heads > 1:
        axes.set_title(f"mean over {heads} heads", fontsize=9)
    figure.colorbar(image, ax=axes, fraction=0.04)
    figure.tight_layout()
    return figure


def figure_png(figure: Figure) -> bytes:
    """The figure as PNG bytes; the figure is closed (matplotlib keeps open ones alive)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()
