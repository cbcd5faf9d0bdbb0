"""Running the command line in-process, for the end-to-end tests."""

from pathlib import Path

import pytest

from seq2seq.cli import main


def run_cli(*args) -> int:
    """Run `seq2seq ARGS` in this process and return its exit status."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in args])
    return exit_info.value.code


def train(toy: Path, run_dir: Path, *overrides: str) -> int:
    """`seq2seq train` on the toy fixture's config with `--set` overrides."""
    sets = [x for o in overrides for x in ("--set", o)]
    return run_cli("train", "--config", toy / "run.yaml", "--run-dir", run_dir, *sets)
