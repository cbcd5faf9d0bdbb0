"""Running the command line in-process, for the end-to-end tests."""

from pathlib import Path

import pytest

from seq2seq.cli import main


def run_cli(*args) -> int:
    """Run `seq2seq ARGS` in this process and return its exit status."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in args])
    return exit_info.value.code


def train(toy: Path, run_dir: Path, *overrides: str, all_heatmaps: bool = False) -> int:
    """`seq2seq train` on the toy fixture's config with `--set` overrides; with
    `all_heatmaps`, its validations draw the default three heatmaps (the toy config: none)."""
    drawn = ["train.heatmaps=3"] if all_heatmaps else []
    sets = [x for o in (*drawn, *overrides) for x in ("--set", o)]
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
