"""The `seq2seq` command line: parse arguments, load the config, call one function.

`app.py` holds the Typer app and the entry point, which turns every problem into one line;
the commands add themselves to it: `training.py` (train, config, average, sweep),
`translation.py` (translate, evaluate, export, plot-attention, serve) and `inspection.py`
(inspect).
"""

from seq2seq.cli import inspection, training, translation  # noqa: F401  (they add the commands)
from seq2seq.cli.app import app, main

__all__ = ["app", "main"]
