"""Run a sweep (or one shard of it): train what is missing (or continue it from the sweep it
continues), resume what was interrupted, skip what is finished, then write the report."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from seq2seq.checkpoint import RunBusy, RunDir
from seq2seq.errors import UserError
from seq2seq.sweep.continuation import check_continuation, continuable, copy_to_continue
from seq2seq.sweep.directory import RunState, SweepDir
from seq2seq.sweep.report import write_report
from seq2seq.sweep.spec import Run, Shard, Sweep
from seq2seq.train.run import train


def run_sweep(sweep: Sweep, root: Path, shard: Shard | None = None) -> Path:
    """Train the sweep's runs in `root` one after another, in this process (each `train`
    call sets its own seeds, threads and log), and write the report; returns its path.

    A run that fails with bad input does not stop the others; the sweep then ends with an
    error naming them. A stop signal stops the sweep: the same command resumes it.
    """
    directory = SweepDir(root)
    runs = shard.select(sweep.runs) if shard else sweep.runs
    check_continuation(sweep, root, runs)  # before anything is written
    directory.adopt(sweep)
    part = f"shard {shard.index}/{shard.count}: " if shard else ""
    _note(sweep, f"{root}: {part}{len(runs)} of {len(sweep.runs)} runs")
    failed, busy = [], []
    for number, run in enumerate(runs, start=1):
        plan = _plan(directory, sweep, run)
        where = f"[{number}/{len(runs)}] {run.name}"
        _note(sweep, f"{where}: {plan.note}")
        if plan.finished:
            continue
        if plan.parent is None:  # a continued run comes with its tokenizer
            directory.share_tokenizer(sweep, run)  # bad data fails every run: stop here
        try:
            if plan.parent is not None:
                copy_to_continue(plan.parent, directory.run(run))
            train(run.config, directory.run(run).root)
        except RunBusy as error:
            _note(sweep, f"{where} skipped: {error}")
            busy.append(run.name)
        except UserError as error:
            _note(sweep, f"{where} failed: {error}")
            failed.append(run.name)
    report = write_report(directory)
    if failed:
        raise UserError(
            f"{len(failed)} run(s) of sweep {sweep.name} failed ({', '.join(failed[:3])}); "
            "see the messages above, fix the cause and run the same command again"
        )
    if busy:
        raise UserError(
            f"{len(busy)} run(s) of sweep {sweep.name} are being trained by another process "
            f"({', '.join(busy[:3])}; see above which); run the same command again when it "
            "has finished, for the full report"
        )
    return report


def describe_sweep(sweep: Sweep, root: Path, shard: Shard | None = None) -> str:
    """What `run_sweep` would do with each run (of the shard) in `root`, a line each, and
    the counts; nothing is trained or written."""
    directory = SweepDir(root)
    runs = shard.select(sweep.runs) if shard else sweep.runs
    check_continuation(sweep, root, runs)
    counts: Counter[str] = Counter()
    lines = []
    for number, run in enumerate(runs, start=1):
        plan = _plan(directory, sweep, run)
        counts[plan.note.split()[0].strip(",")] += 1
        unready = plan.parent is not None and not continuable(plan.parent)
        problem = " (not finished there, or its last checkpoint gone: it would fail)"
        lines.append(f"[{number}/{len(runs)}] {run.name}: {plan.note}{problem if unready else ''}")
    total = ", ".join(f"{count} {what}" for what, count in counts.items())
    return "\n".join([*lines, f"{root}: {len(runs)} of {len(sweep.runs)} runs: {total}"])


@dataclass(frozen=True)
class _Plan:
    note: str  # what is done with the run: finished, skipped; training; resuming; continuing
    finished: bool
    parent: RunDir | None  # the run of the sweep it continues, that it starts as a copy of


def _plan(directory: SweepDir, sweep: Sweep, run: Run) -> _Plan:
    state = directory.state(run)
    if state is RunState.FINISHED:
        return _Plan("finished, skipped", True, None)
    source = sweep.definition.continue_from
    if source is not None and state is RunState.NOT_STARTED:
        return _Plan(f"continuing its run in {source}", False, SweepDir(Path(source)).run(run))
    return _Plan("resuming" if state is RunState.INTERRUPTED else "training", False, None)


def _note(sweep: Sweep, message: str) -> None:
    print(f"sweep {sweep.name}: {message}", file=sys.stderr, flush=True)
