"""The sweep directory: its stored definition, its run directories and shared tokenizers.

```
DIR/  sweep.yaml (the resolved definition)  tokenizer/ (or tokenizers/KEY/)
      runs/CELL,seed=N/ (ordinary run directories)  report/
```
Several shards may work in one directory at once (an array job): whatever two of them
could write at the same time is written under a unique temporary name and renamed.
"""

from __future__ import annotations

import enum
import shutil
import sys
from pathlib import Path

import yaml

from seq2seq.checkpoint import RunDir
from seq2seq.config import Config, flatten
from seq2seq.data.training_corpus import read_training_pairs, tokenize_training_pairs
from seq2seq.errors import UserError
from seq2seq.files import atomic_write_text, publish_directory
from seq2seq.sweep.spec import Run, Sweep, SweepDefinition, expand, read_definition


class RunState(enum.Enum):
    FINISHED = "finished"  # test/scores.json written
    INTERRUPTED = "interrupted"  # a checkpoint to resume from, no scores
    NOT_STARTED = "not started"


class SweepDir:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def definition(self) -> Path:
        return self.root / "sweep.yaml"

    @property
    def report(self) -> Path:
        return self.root / "report"

    def run(self, run: Run) -> RunDir:
        return RunDir(self.root / "runs" / run.name)

    def state(self, run: Run) -> RunState:
        return run_state(self.run(run))

    def load(self) -> Sweep:
        return expand(read_definition(self.definition), self.definition)

    def adopt(self, sweep: Sweep) -> None:
        """Store the sweep's definition, refusing one whose runs could not be compared with
        the runs already here: grid values, seeds and the baseline may change; the base
        config, `set` and the grid's fields may not."""
        new = sweep.definition
        if self.definition.is_file():
            old = read_definition(self.definition)
            changes = _changes(old, new)
            if changes:
                raise UserError(
                    f"{self.root} holds runs of another sweep definition "
                    f"({'; '.join(changes[:3])}); their results would not be comparable: "
                    "pass a new --sweep-dir, or restore the sweep file (only grid values, "
                    "seeds and the baseline may change)"
                )
            if old == new:
                return
        atomic_write_text(self.definition, yaml.safe_dump(new.model_dump(), sort_keys=False))

    def share_tokenizer(self, sweep: Sweep, run: Run) -> None:
        """Give the run its shared tokenizer, trained by the first run that needs it with
        the base config's seed (not the run's: one tokenizer for every seed)."""
        if not self.run(run).tokenizer.is_dir():
            shared = self.root / run.tokenizer
            if not shared.is_dir():
                print(
                    f"sweep {sweep.name}: training the shared tokenizer {shared}", file=sys.stderr
                )
            seed = sweep.definition.config["seed"]
            install_tokenizer(shared_tokenizer(run.config, seed, shared), self.run(run))


def run_state(run: RunDir) -> RunState:
    if (run.test / "scores.json").is_file():
        return RunState.FINISHED
    if run.checkpoint("last").is_file() or run.checkpoint("previous").is_file():
        return RunState.INTERRUPTED
    return RunState.NOT_STARTED


def shared_tokenizer(cfg: Config, seed: int, directory: Path) -> Path:
    """Train the tokenizer of `cfg` into `directory` unless it is there: once for many runs
    that differ in nothing it depends on (concurrent trainers keep the first one made)."""
    if not directory.is_dir():
        corpus, _ = read_training_pairs(cfg.data)
        # The ids go with the tokenizer, so no run of the sweep tokenizes the corpus again.
        publish_directory(
            directory, lambda tmp: tokenize_training_pairs(cfg.tokenizer, corpus, tmp, seed)
        )
    return directory


def install_tokenizer(shared: Path, run: RunDir) -> None:
    """Copy a shared tokenizer into a run directory, where training loads it instead of
    training its own (see train.datasets)."""
    if not run.tokenizer.is_dir():
        publish_directory(run.tokenizer, lambda tmp: shutil.copytree(shared, tmp))


def _changes(old: SweepDefinition, new: SweepDefinition) -> list[str]:
    """What differs between two definitions in ways that make their runs incomparable."""
    changes = []
    if old.name != new.name:
        changes.append(f"name: {old.name!r} -> {new.name!r}")
    if set(old.grid) != set(new.grid):
        changes.append(f"grid fields: {', '.join(old.grid)} -> {', '.join(new.grid)}")
    a, b = flatten(old.config), flatten(new.config)
    for key in sorted(a.keys() | b.keys()):
        if a.get(key) != b.get(key):
            changes.append(f"{key}: {a.get(key)!r} -> {b.get(key)!r}")
    return changes
