"""Run a sweep (or one shard of it): train what is missing (or continue it from the sweep it
continues), resume what was interrupted, skip what is finished, then write the report."""

from __future__ import annotations

import sys
from pathlib import Path

from seq2seq.errors import UserError
from seq2seq.sweep.directory import RunState, SweepDir, copy_to_continue
from seq2seq.sweep.report import write_report
from seq2seq.sweep.spec import Shard, Sweep
from seq2seq.train.run import train


def run_sweep(sweep: Sweep, root: Path, shard: Shard | None = None) -> Path:
    """Train the sweep's runs in `root` one after another, in this process (each `train`
    call sets its own seeds, threads and log), and write the report; returns its path.

    A run that fails with bad input does not stop the others; the sweep then ends with an
    error naming them. A stop signal stops the sweep: the same command resumes it.
    """
    directory = SweepDir(root)
    directory.adopt(sweep)
    runs = shard.select(sweep.runs) if shard else sweep.runs
    part = f"shard {shard.index}/{shard.count}: " if shard else ""
    _note(sweep, f"{root}: {part}{len(runs)} of {len(sweep.runs)} runs")
    failed = []
    for number, run in enumerate(runs, start=1):
        state = directory.state(run)
        where = f"[{number}/{len(runs)}] {run.name}"
        if state is RunState.FINISHED:
            _note(sweep, f"{where}: finished, skipped")
            continue
        parent = sweep.definition.continue_from if state is RunState.NOT_STARTED else None
        doing = "resuming" if state is RunState.INTERRUPTED else "training"
        _note(sweep, f"{where}: {f'continuing its run in {parent}' if parent else doing}")
        if parent is None:  # a continued run comes with its tokenizer
            directory.share_tokenizer(sweep, run)  # bad data fails every run: stop here
        try:
            if parent is not None:
                copy_to_continue(SweepDir(Path(parent)).run(run), directory.run(run))
            train(run.config, directory.run(run).root)
        except UserError as error:
            _note(sweep, f"{where} failed: {error}")
            failed.append(run.name)
    report = write_report(directory)
    if failed:
        raise UserError(
            f"{len(failed)} run(s) of sweep {sweep.name} failed ({', '.join(failed[:3])}); "
            "see the messages above, fix the cause and run the same command again"
        )
    return report


def _note(sweep: Sweep, message: str) -> None:
    print(f"sweep {sweep.name}: {message}", file=sys.stderr, flush=True)
