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
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml

from seq2seq.checkpoint import RunDir
from seq2seq.config import Config, flatten
from seq2seq.data.corpus import drop_empty, read_parallel
from seq2seq.data.id_cache import encode_corpus
from seq2seq.data.tokenizer import train_tokenizer
from seq2seq.errors import UserError
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
        _publish(self.definition, yaml.safe_dump(new.model_dump(), sort_keys=False))

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
        corpus, _ = drop_empty(read_parallel(cfg.data.train, cfg.data.src, cfg.data.tgt))

        def make(tmp: Path) -> None:
            # The ids go with the tokenizer, so no run of the sweep tokenizes the corpus again.
            tokenizer = train_tokenizer(cfg.tokenizer, corpus.src, corpus.tgt, tmp, seed)
            encode_corpus(tokenizer, tmp, corpus.src, corpus.tgt)

        publish_directory(directory, make)
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


def _publish(path: Path, text: str) -> None:
    """Write a file through a temporary file of its own and rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", delete=False
    ) as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(f.name, path)


def publish_directory(target: Path, fill: Callable[[Path], object], replace: bool = False) -> None:
    """Have `fill` make a directory at a temporary path, then rename it to `target`, so
    that no one sees it half-made. If another process puts one there first, keep theirs:
    it is as good (the same tokenizer; a report as fresh). `replace` replaces an older one.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        fill(staging / target.name)
        if replace:
            try:
                os.rename(target, staging / "old")  # rename() cannot replace a full directory
            except FileNotFoundError:
                pass
        try:
            os.rename(staging / target.name, target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
