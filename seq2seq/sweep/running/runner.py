"""Run a sweep (or one shard of it): train what is missing (or continue it from the sweep it
continues), resume what was interrupted, skip what is finished, then write the report."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from seq2seq.checkpoint import lock_holder
from seq2seq.device import default_threads
from seq2seq.errors import UserError
from seq2seq.sweep.directory import SweepDir
from seq2seq.sweep.reporting.report import write_report
from seq2seq.sweep.running.continuation import check_continuation, continuable
from seq2seq.sweep.running.jobs import JobPool, Slot, plan_slots, visible_gpus
from seq2seq.sweep.running.one_run import Outcome, Status, plan_run, train_run
from seq2seq.sweep.spec import Run, Shard, Sweep


def run_sweep(
    sweep: Sweep,
    root: Path,
    shard: Shard | None = None,
    jobs: int | None = None,
    jobs_per_gpu: int | None = None,
) -> Path:
    """Train the sweep's runs in `root`, and write the report; returns its path. Without
    `jobs` (or `jobs_per_gpu`), one after another in this process (each `train` call sets
    its own seeds, threads and log); with them, that many at once (jobs.py).

    A run that fails with bad input does not stop the others; the sweep then ends with an
    error naming them. A stop signal stops the sweep: the same command resumes it.
    """
    slots = None
    if jobs is not None or jobs_per_gpu is not None:  # refused before anything is written
        slots = _slots(sweep, root, shard, jobs, jobs_per_gpu)
    directory, runs = prepare_sweep(sweep, root, shard)
    todo = [run for run in runs if not plan_run(directory, sweep, run).finished]
    if slots is None:
        outcomes = {run.name: _train_here(directory, sweep, run, runs) for run in todo}
    else:
        outcomes = JobPool(directory, todo, slots, sweep.name).run()
    report = write_report(directory)
    raise_for_outcomes(sweep, outcomes)
    return report


def prepare_sweep(sweep: Sweep, root: Path, shard: Shard | None) -> tuple[SweepDir, list[Run]]:
    """Check the sweep, store its definition and make what its runs share, before any run
    starts (however they are run); returns the directory and the runs (of the shard)."""
    directory = SweepDir(root)
    runs = shard.select(sweep.runs) if shard else sweep.runs
    check_continuation(sweep, root, runs)  # before anything is written
    directory.adopt(sweep)
    part = f"shard {shard.index}/{shard.count}: " if shard else ""
    note(sweep, f"{root}: {part}{len(runs)} of {len(sweep.runs)} runs")
    for number, run in enumerate(runs, start=1):
        plan = plan_run(directory, sweep, run)
        if plan.finished:
            note(sweep, f"[{number}/{len(runs)}] {run.name}: {plan.note}")
        elif plan.parent is None:  # a continued run comes with its tokenizer
            directory.share_tokenizer(sweep, run)  # bad data fails every run: stop here
    return directory, runs


def _slots(
    sweep: Sweep, root: Path, shard: Shard | None, jobs: int | None, jobs_per_gpu: int | None
) -> list[Slot]:
    directory = SweepDir(root)
    runs = shard.select(sweep.runs) if shard else sweep.runs
    todo = [run for run in runs if not plan_run(directory, sweep, run).finished]
    slots = plan_slots(jobs, jobs_per_gpu, visible_gpus(todo), default_threads(), len(todo))
    if jobs and jobs > len(slots):
        note(sweep, f"--jobs {jobs}, and {len(todo)} run(s) to train: {len(slots)} at once")
    return slots


def _train_here(directory: SweepDir, sweep: Sweep, run: Run, runs: list[Run]) -> Outcome:
    where = f"[{runs.index(run) + 1}/{len(runs)}] {run.name}"
    note(sweep, f"{where}: {plan_run(directory, sweep, run).note}")
    outcome = train_run(directory, sweep, run)
    if outcome.status in (Status.BUSY, Status.FAILED):
        verb = "skipped" if outcome.status is Status.BUSY else "failed"
        note(sweep, f"{where} {verb}: {outcome.message}")
    return outcome


def raise_for_outcomes(sweep: Sweep, outcomes: dict[str, Outcome]) -> None:
    """The error that ends a sweep whose runs failed or were trained by another process."""
    failed = [name for name, outcome in outcomes.items() if outcome.status is Status.FAILED]
    busy = [name for name, outcome in outcomes.items() if outcome.status is Status.BUSY]
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


def describe_sweep(sweep: Sweep, root: Path, shard: Shard | None = None) -> str:
    """What `run_sweep` would do with each run (of the shard) in `root`, a line each, and
    the counts; nothing is trained or written."""
    directory = SweepDir(root)
    runs = shard.select(sweep.runs) if shard else sweep.runs
    check_continuation(sweep, root, runs)
    counts: Counter[str] = Counter()
    lines = []
    for number, run in enumerate(runs, start=1):
        plan = plan_run(directory, sweep, run)
        counts[plan.note.split()[0].strip(",")] += 1
        unready = plan.parent is not None and not continuable(plan.parent)
        problem = " (not finished there, or its last checkpoint gone: it would fail)"
        holder = None if plan.finished else lock_holder(directory.run(run))
        now = f" (now: trained by {holder})" if holder else ""
        lines.append(
            f"[{number}/{len(runs)}] {run.name}: {plan.note}{problem if unready else ''}{now}"
        )
    total = ", ".join(f"{count} {what}" for what, count in counts.items())
    return "\n".join([*lines, f"{root}: {len(runs)} of {len(sweep.runs)} runs: {total}"])


def note(sweep: Sweep, message: str) -> None:
    print(f"sweep {sweep.name}: {message}", file=sys.stderr, flush=True)
