"""A `--jobs` worker process: `python -m seq2seq.sweep.running.worker ROOT NAME [THREADS]` trains
the run NAME of the sweep stored in ROOT (one_run.train_job). Its stderr is the run's
console log, which the sweep reads for its display; the exit status says how it ended
(below), and where it failed the last line of stderr says why."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from seq2seq.errors import UserError
from seq2seq.processes import die_with_parent
from seq2seq.sweep.running.one_run import Status, train_job
from seq2seq.train.interrupt import Interrupted

EXIT_STATUS = {Status.TRAINED: 0, Status.SKIPPED: 0, Status.FAILED: 2, Status.BUSY: 75}
# Stopped by signal N: 128 + N, as `seq2seq train` ends (train.interrupt).


def command(root: Path, name: str, threads: int | None) -> list[str]:
    """The command line of a worker for the run `name`."""
    tail = [] if threads is None else [str(threads)]
    return [sys.executable, "-m", "seq2seq.sweep.running.worker", str(root), name, *tail]


def main(argv: list[str]) -> int:
    root, name, *threads = argv
    die_with_parent(dict(os.environ))
    try:
        outcome = train_job(root, name, int(threads[0]) if threads else None)
    except Interrupted as stop:
        print(f"seq2seq: {stop}", file=sys.stderr)
        return stop.exit_code
    except (UserError, OSError) as error:  # the sweep directory itself: unreadable, full
        print(f"seq2seq: error: {error}", file=sys.stderr)
        return 2
    if outcome.message:
        print(f"seq2seq: error: {outcome.message}", file=sys.stderr)
    return EXIT_STATUS[outcome.status]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
