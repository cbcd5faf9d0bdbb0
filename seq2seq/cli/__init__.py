"""The `seq2seq` command line: parse arguments, load the config, call one function.

`app.py` holds the Typer app and the entry point, which turns every problem into one line;
the commands add themselves to it: `training.py` (train, config, average, sweep),
`translation.py` (translate, export, plot-attention, serve), `scoring.py` (evaluate,
score) and `inspection.py` (inspect).
"""

import os

# OpenMP threads that wait for work spin by default, and on a machine whose cores other
# processes load, spinning threads take the cores from the threads that would compute:
# two trainings side by side on 2 busy cores ran >14x slower. Waiting threads sleep
# instead with the passive policy, which OpenMP reads once, when torch loads it, so it is
# set here, before any command imports torch. A user's own setting wins
# (docs/troubleshooting.md).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The command modules add their commands to the app as they are imported.
from seq2seq.cli import inspection, scoring, training, translation  # noqa: E402, F401
from seq2seq.cli.app import app, main  # noqa: E402

__all__ = ["app", "main"]
