"""The sweep file the sweep tests start from, and a writer for variants of it."""

from __future__ import annotations

from pathlib import Path

import yaml

BASE = {
    "name": "base",
    "data": {
        "src": "src",
        "tgt": "tgt",
        "train": "d/train",
        "valid": "d/valid",
        "test": ["d/test"],
    },
    "model": {"embed_dim": 8, "hidden_dim": 8},
}
SWEEP = {
    "name": "s",
    "base": "base.yaml",
    "grid": {"model.attention.type": ["local-m", "local-p"], "model.attention.window": [3, 5]},
    "seeds": [1, 2],
    "baseline": {"model.attention.type": "local-m", "model.attention.window": 3},
    "set": {"train.max_steps": 7},
}


def write_sweep(directory: Path, base_config: dict = BASE, **changes) -> Path:
    """base.yaml and a sweep file (SWEEP with `changes`) in `directory`, the working
    directory; a changed grid without a baseline gets its first cell as the baseline."""
    (directory / "base.yaml").write_text(yaml.safe_dump(base_config))
    if "grid" in changes and "baseline" not in changes:
        changes["baseline"] = {field: values[0] for field, values in changes["grid"].items()}
    path = directory / "sweep_file.yaml"
    path.write_text(yaml.safe_dump({**SWEEP, **changes}))
    return path
