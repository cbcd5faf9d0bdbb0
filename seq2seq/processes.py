"""Child processes that run this seq2seq: a sweep's workers and submitit jobs, and the
processes that draw subword samples of a corpus."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

# The directory holding the seq2seq package this process imported.
_SOURCE = str(Path(__file__).resolve().parents[1])


def same_code_environment(environ: dict[str, str]) -> dict[str, str]:
    """`environ` with this process's seq2seq first on PYTHONPATH, so that a child process
    (a worker, a submitit job) imports the code the parent imported, not another copy."""
    paths = [_SOURCE, *filter(None, environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


# Where a sweep tells its workers its pid (`die_with_parent`).
PARENT_VARIABLE = "SEQ2SEQ_SWEEP_PID"


def die_with_parent(environ: dict[str, str]) -> None:
    """In a worker started by a sweep (whose pid `environ` holds, PARENT_VARIABLE): on
    Linux, have the kernel send it SIGTERM when that process dies, however it dies (SIGKILL
    included), so that no training outlives its sweep; a run stopped so saves its
    checkpoint, as one stopped by a signal does, and the sweep run again resumes it."""
    parent = environ.get(PARENT_VARIABLE)
    if parent is None or not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1  # <linux/prctl.h>
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != int(parent):  # it died before the call: nothing would come
        os.kill(os.getpid(), signal.SIGTERM)
