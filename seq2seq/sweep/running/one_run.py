"""What a sweep does with one of its runs, in whichever process trains it: the sweep's
own, a `--jobs` worker (worker.py) or a submitit job (launch.py). The last two read the run
from the sweep directory's sweep.yaml, so every way trains the same config the same way."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from seq2seq.checkpoint import RunBusy, RunDir
from seq2seq.errors import UserError
from seq2seq.sweep.directory import RunState, SweepDir
from seq2seq.sweep.kept_attention import keep_attention
from seq2seq.sweep.running.continuation import copy_to_continue
from seq2seq.sweep.spec import Run, Sweep
from seq2seq.train.run import train


@dataclass(frozen=True)
class Plan:
    note: str  # what is done with the run: finished, skipped; training; resuming; continuing
    finished: bool
    parent: RunDir | None  # the run of the sweep it continues, that it starts as a copy of


def plan_run(directory: SweepDir, sweep: Sweep, run: Run) -> Plan:
    state = directory.state(run)
    if state is RunState.FINISHED:
        return Plan("finished, skipped", True, None)
    source = sweep.definition.continue_from
    if source is not None and state is RunState.NOT_STARTED:
        return Plan(f"continuing its run in {source}", False, SweepDir(Path(source)).run(run))
    return Plan("resuming" if state is RunState.INTERRUPTED else "training", False, None)


class Status(enum.Enum):
    TRAINED = "trained"
    SKIPPED = "finished before"
    FAILED = "failed"  # bad input, named in the message
    BUSY = "trained by another process"


@dataclass(frozen=True)
class Outcome:
    status: Status
    message: str = ""


def train_run(directory: SweepDir, sweep: Sweep, run: Run, threads: int | None = None) -> Outcome:
    """Train (resume, continue) the run unless it is finished; `threads`: its CPU threads
    where its config leaves them to the default. A stop signal raises `Interrupted`."""
    plan = plan_run(directory, sweep, run)
    if plan.finished:
        return Outcome(Status.SKIPPED)
    config = run.config
    if threads is not None and config.train.threads is None:
        config = config.model_copy(deep=True)
        config.train.threads = threads
    try:
        if plan.parent is not None:
            copy_to_continue(plan.parent, directory.run(run))
        train(config, directory.run(run).root)
        keep_attention(directory.run(run), config)
    except RunBusy as error:
        return Outcome(Status.BUSY, str(error))
    except UserError as error:
        return Outcome(Status.FAILED, str(error))
    return Outcome(Status.TRAINED)


def train_job(root: str, name: str, threads: int | None = None) -> Outcome:
    """Train the run `name` of the sweep stored in `root`: the job of a worker process or of
    submitit, which gets no more than these strings (and pickles no config)."""
    directory = SweepDir(Path(root))
    sweep = directory.load()
    run = next((run for run in sweep.runs if run.name == name), None)
    if run is None:
        return Outcome(
            Status.FAILED,
            f"{directory.definition} has no run {name} (the sweep file changed after it was "
            "started); run the sweep command again",
        )
    return train_run(directory, sweep, run, threads)
