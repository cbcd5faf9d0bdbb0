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
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from seq2seq.checkpoint import RunDir
from seq2seq.config import (
    Config,
    config_from_dict,
    describe_validation_error,
    flatten,
)
from seq2seq.data.corpus import read_lines
from seq2seq.data.sources import read_corpus
from seq2seq.data.training_data import prepare_training_data
from seq2seq.device import machine_label
from seq2seq.errors import UserError
from seq2seq.files import atomic_write_text, publish_directory
from seq2seq.metrics import HEADLINE, METRICS
from seq2seq.sweep.kept_attention import check_kept_attention
from seq2seq.sweep.spec import Run, Sweep, SweepDefinition, expand, read_definition


class RunState(enum.Enum):
    FINISHED = "finished"  # test/scores.json written, and every file of it readable
    DAMAGED = "damaged"  # test/scores.json written, but a file of it unreadable: redone
    INTERRUPTED = "interrupted"  # a checkpoint to resume from, no scores
    NOT_STARTED = "not started"


# The metric of the report's learning curves: every validation must have its score.
CURVE_METRIC = HEADLINE.key


class Validation(BaseModel):
    """A validation of summary.json, whose records hold each metric's score beside the step
    and the loss; runs trained before a metric joined the table lack it (TER)."""

    step: int
    loss: float
    scores: dict[str, float]  # metric key (metrics.METRICS) -> score

    @model_validator(mode="before")
    @classmethod
    def _gather_scores(cls, record: Any) -> Any:
        if not isinstance(record, dict):
            return record  # refused as not a record
        scores = {metric.key: record[metric.key] for metric in METRICS if metric.key in record}
        return {**record, "scores": scores}

    @model_validator(mode="after")
    def _has_the_curve_metric(self) -> Validation:
        if CURVE_METRIC not in self.scores:
            raise ValueError(f"the validation at step {self.step} has no {CURVE_METRIC}")
        return self


class Summary(BaseModel):
    """The fields of a finished run's summary.json that reports read."""

    steps: int
    best_step: int
    train_seconds: float
    target_tokens_per_s: float
    parameters: int
    validations: list[Validation] = Field(min_length=1)

    @model_validator(mode="after")
    def _best_was_validated(self) -> Summary:
        if self.best_step not in {point.step for point in self.validations}:
            raise ValueError(f"best_step {self.best_step} is no validation's step")
        return self


@dataclass(frozen=True)
class FinishedRun:
    root: RunDir
    summary: Summary
    hypotheses: dict[str, list[str]]  # test set name -> its translations, a line each
    # Test set name -> the scores of the last checkpoint (test/last/scores.json), where the
    # test sets were translated with another one; runs trained before that lack them.
    last_scores: dict[str, dict[str, float]]
    # The kinds of machine it trained on (meta.json; [] for runs from before it said so).
    machines: list[str]


class NotFinished(Exception):
    """A run that has no readable results: its state, and what is wrong where DAMAGED."""

    def __init__(self, state: RunState, problem: str = "") -> None:
        super().__init__(problem or state.value)
        self.state = state


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
        try:
            self.finished(run)
        except NotFinished as not_finished:
            return not_finished.state
        return RunState.FINISHED

    def finished(self, run: Run) -> FinishedRun:
        """The run's results, checked readable: raises NotFinished (DAMAGED naming the
        file and the problem where test/scores.json is there but a file is not right)."""
        run_dir = self.run(run)
        state = run_state(run_dir)
        if state is RunState.NOT_STARTED and run_dir.root.exists():
            if not run_dir.root.is_dir():
                raise NotFinished(
                    RunState.DAMAGED, f"{run_dir.root} is a file, not a run directory"
                )
            if not any(run_dir.root.iterdir()):  # a run not started holds its tokenizer at least
                raise NotFinished(RunState.DAMAGED, f"{run_dir.root} is empty")
        if state is not RunState.FINISHED:
            raise NotFinished(state)
        try:
            return read_finished(run_dir, run.config)
        except (OSError, ValueError, ValidationError) as error:
            problem = str(error).splitlines()[0]
            raise NotFinished(RunState.DAMAGED, problem) from None

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


def read_finished(run: RunDir, cfg: Config) -> FinishedRun:
    """Read what a finished run wrote; a file that cannot be read raises OSError or
    ValueError naming it."""
    scores = _read_json(run.test / "scores.json")
    summary = _read_json(run.summary)
    check_kept_attention(run)
    hypotheses = {}
    for corpus in cfg.data.test:
        name = cfg.data.test_name(corpus)
        if not isinstance(scores, dict) or not isinstance(scores.get(name), dict):
            raise ValueError(f"{run.test / 'scores.json'} has no scores of test set {name}")
        path = run.test_hypotheses(name)
        try:
            lines = read_lines(path)
        except UserError as error:  # missing, not UTF-8: the run's file, not the data
            raise ValueError(str(error)) from None
        expected = len(read_corpus(corpus, *cfg.data.pair(corpus)))
        if len(lines) != expected:
            raise ValueError(
                f"{path} has {len(lines)} lines, not one per test sentence ({expected}): truncated"
            )
        hypotheses[name] = lines
    last = run.test / "last" / "scores.json"
    last_scores = _read_json(last) if last.is_file() else {}
    if not isinstance(last_scores, dict) or not all(map(_is_mapping, last_scores.values())):
        raise ValueError(f"{last} is not a mapping of test sets to scores")
    try:
        read = Summary.model_validate(summary)
    except ValidationError as error:
        raise ValueError(f"{run.summary}: {describe_validation_error(error, Summary)}") from None
    return FinishedRun(run, read, hypotheses, last_scores, _machines(run))


def _machines(run: RunDir) -> list[str]:
    """Each machine meta.json lists, in words."""
    try:
        listed = json.loads(run.meta.read_text(encoding="utf-8")).get("machines", [])
    except (OSError, ValueError, AttributeError):  # no meta.json, or not one that lists them
        return []
    return [machine_label(m) for m in listed if isinstance(m, dict)]


def _is_mapping(value: object) -> bool:
    return isinstance(value, dict)


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} cannot be read ({type(error).__name__}: {error})") from None


def shared_tokenizer(cfg: Config, seed: int, directory: Path) -> Path:
    """Make the tokenizer of `cfg` and its prepared corpora in `directory` unless they are
    there: once for many runs that differ in nothing they depend on (concurrent shards
    wait for the one that makes them)."""
    prepare_training_data(cfg.data, cfg.tokenizer, directory, seed)
    return directory


def install_tokenizer(shared: Path, run: RunDir) -> None:
    """Give a run directory the shared tokenizer, where training loads it instead of
    training its own (see train.datasets). Its files are hard links where the file system
    allows: the prepared corpora take no more disk per run, and every run maps the same
    pages (no file there is ever written in place)."""
    if not run.tokenizer.is_dir():
        publish_directory(
            run.tokenizer, lambda tmp: shutil.copytree(shared, tmp, copy_function=_link)
        )


def _link(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or one without hard links
        shutil.copy2(source, target)


def _changes(old: SweepDefinition, new: SweepDefinition) -> list[str]:
    """What differs between two definitions in ways that make their runs incomparable."""
    changes = []
    if old.name != new.name:
        changes.append(f"name: {old.name!r} -> {new.name!r}")
    if set(old.grid) != set(new.grid):
        changes.append(f"grid fields: {', '.join(old.grid)} -> {', '.join(new.grid)}")
    try:  # read by today's schema: a field added since the runs, at its default, is no change
        stored = config_from_dict(old.config).to_dict()
    except UserError as error:
        return [*changes, f"the stored config no longer reads: {error}"]
    a, b = flatten(stored), flatten(new.config)
    for key in sorted(a.keys() | b.keys()):
        if a.get(key) != b.get(key):
            changes.append(f"{key}: {a.get(key)!r} -> {b.get(key)!r}")
    return changes
