"""The attention files a finished run keeps so that its sweep's report can be rebuilt once
the checkpoints are gone: init-attention.json (the diagnostics of the initial weights, by
site) and best-attention.json (the heatmap of the best checkpoint). A damaged one (not
JSON, or not of the shape the report reads) is removed where the checkpoint it was
measured from is still there, so that the report measures it again, and makes the run
damaged where not."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from seq2seq.checkpoint import RunDir


def check_kept_attention(run: RunDir) -> None:
    """Raise ValueError naming a damaged attention file that cannot be measured again."""
    kept: list[tuple[Path, Callable[[object], bool], Path]] = [
        (run.initial_attention, _is_sites, run.checkpoint("last")),
        (run.best_attention, _is_heatmap, run.checkpoint("best")),
    ]
    for path, whole, source in kept:
        if not path.is_file() or _reads(path, whole):
            continue
        if source.is_file():
            path.unlink()  # measured again from `source` when the report needs it
            continue
        raise ValueError(
            f"{path} is damaged and {source.name}, which it is measured from, is gone; "
            "restore the file, or train the run again"
        )


def _reads(path: Path, whole: Callable[[object], bool]) -> bool:
    try:
        return whole(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return False


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_sites(value: object) -> bool:
    """Site -> {"queries": str, "keys": str, "mean": {diagnostic: number}, ...}."""
    return isinstance(value, dict) and all(
        isinstance(entry, dict)
        and isinstance(entry.get("queries"), str)
        and isinstance(entry.get("keys"), str)
        and isinstance(entry.get("mean"), dict)
        and all(_number(v) for v in entry["mean"].values())
        for entry in value.values()
    )


def _is_heatmap(value: object) -> bool:
    """{"source": [piece], "target": [piece], "weights": target x source numbers, ...}."""
    if not isinstance(value, dict):
        return False
    source, target, weights = value.get("source"), value.get("target"), value.get("weights")
    pieces = all(
        isinstance(p, list) and all(isinstance(x, str) for x in p) for p in (source, target)
    )
    return (
        pieces
        and isinstance(weights, list)
        and len(weights) == len(target)
        and all(
            isinstance(r, list) and len(r) == len(source) and all(map(_number, r)) for r in weights
        )
    )
