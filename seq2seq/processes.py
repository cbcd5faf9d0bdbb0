"""Child processes that run this seq2seq: a sweep's workers and submitit jobs, and the
processes that draw subword samples of a corpus."""

from __future__ import annotations

import os
from pathlib import Path

# The directory holding the seq2seq package this process imported.
_SOURCE = str(Path(__file__).resolve().parents[1])


def same_code_environment(environ: dict[str, str]) -> dict[str, str]:
    """`environ` with this process's seq2seq first on PYTHONPATH, so that a child process
    (a worker, a submitit job) imports the code the parent imported, not another copy."""
    paths = [_SOURCE, *filter(None, environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
