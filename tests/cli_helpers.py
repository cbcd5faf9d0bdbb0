"""Running the command line in-process, for the end-to-end tests."""

from pathlib import Path

import pytest

from seq2seq.cli import main
from seq2seq.train import validation


def run_cli(*args) -> int:
    """Run `seq2seq ARGS` in this process and return its exit status."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in args])
    return exit_info.value.code


def draw_one_heatmap(patch: pytest.MonkeyPatch) -> None:
    """Validations draw one attention heatmap, not the library's three: drawing them takes
    most of a toy run's time. The shared runs of conftest.py draw all three."""
    patch.setattr(validation, "HEATMAP_SENTENCES", 1)


def train(toy: Path, run_dir: Path, *overrides: str, all_heatmaps: bool = False) -> int:
    """`seq2seq train` on the toy fixture's config with `--set` overrides."""
    sets = [x for o in overrides for x in ("--set", o)]
    with pytest.MonkeyPatch.context() as patch:
        if not all_heatmaps:
            draw_one_heatmap(patch)
        return run_cli("train", "--config", toy / "run.yaml", "--run-dir", run_dir, *sets)


def train_straight_and_resumed(
    toy: Path, root: Path, *overrides: str, steps: int, stop: int
) -> tuple[Path, Path]:
    """Train the toy run `steps` updates into root/straight, and into root/resumed first
    `stop` updates, then resumed to `steps`; return the two run directories."""
    straight, resumed = root / "straight", root / "resumed"
    assert train(toy, straight, *overrides, f"train.max_steps={steps}") == 0
    assert train(toy, resumed, *overrides, f"train.max_steps={stop}") == 0
    assert train(toy, resumed, *overrides, f"train.max_steps={steps}") == 0
    return straight, resumed
