"""The sweep file the sweep tests start from, a writer for variants of it, and the cells
of a report's table rows."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import torch
import yaml
from matplotlib.figure import Figure

from seq2seq.checkpoint import RunDir
from seq2seq.sweep.reporting import diagnostics, report

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


REFERENCES = [f"sentence number {i} with some words in it" for i in range(30)]


def hand_made_run(
    root: Path, run, scores: dict, hypotheses: list[str], validations, steps: int = 100
) -> None:
    """A finished run directory as train.run leaves it, written by hand: `steps` updates."""
    path = root / "runs" / run.name
    (path / "test").mkdir(parents=True)
    (path / "config.yaml").write_text(run.config.to_yaml())
    (path / "test/test.hyp").write_text("".join(h + "\n" for h in hypotheses))
    (path / "test/scores.json").write_text(json.dumps({"test": scores}))
    summary = {
        "steps": steps,
        "best_step": validations[-1][0],
        "best_bleu": scores["bleu"],
        "train_seconds": 10.0 * run.seed,
        "target_tokens_per_s": 1000.0,
        "parameters": 1234,
        "skipped_updates": 0,
        # The loss falls with BLEU, so that only the best step's gives its perplexity.
        "validations": [
            {"step": s, "bleu": b, "chrf": 0.0, "loss": 5.0 - b / 50} for s, b in validations
        ],
    }
    (path / "summary.json").write_text(json.dumps(summary))


def cells(line: str) -> list[str]:
    """The cells of a markdown table row."""
    return [cell.strip() for cell in line.strip("|").split("|")]


def row(markdown: list[str], first: str) -> list[str]:
    """The cells of the table row that starts with `first`."""
    return cells(next(line for line in markdown if line.startswith(f"| {first} |")))


FAST = {"train.max_steps": 4, "train.valid_every": 100, "train.threads": 1, "decode.beam": 1}


def assert_same_runs(first: Path, second: Path, count: int = 2) -> None:
    """The `count` runs of the second sweep directory and the first's of the same names:
    bit-identical weights and the same test scores."""
    runs = sorted(p.name for p in (second / "runs").iterdir())
    assert len(runs) == count and set(runs) <= {p.name for p in (first / "runs").iterdir()}
    for name in runs:
        for checkpoint in ("last", "best"):
            a, b = (
                torch.load(RunDir(d / "runs" / name).checkpoint(checkpoint), weights_only=True)
                for d in (first, second)
            )
            assert a["model"].keys() == b["model"].keys()
            assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"]), name
        scores = [(d / "runs" / name / "test/scores.json").read_text() for d in (first, second)]
        assert scores[0] == scores[1]


@contextlib.contextmanager
def charts_undrawn() -> Iterator[None]:
    """Within, a sweep report's charts are built but written as a blank PNG, not drawn: for
    the tests of sweeps that never look at them (drawing one takes a third of a second; the
    report's own tests draw every one)."""
    blank = report.figure_png(plt.figure(figsize=(0.1, 0.1)))

    def undrawn(figure: Figure) -> bytes:
        plt.close(figure)
        return blank

    with pytest.MonkeyPatch.context() as patch:
        for module in (report, diagnostics):
            patch.setattr(module, "figure_png", undrawn)
        yield
