"""Starting `seq2seq serve` as a real process, for the tests that talk to it over HTTP."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path


def start_server(run: Path, *options: str) -> tuple[subprocess.Popen, str]:
    """`seq2seq serve` on a free port of 127.0.0.1; the process and its URL."""
    command = [sys.executable, "-m", "seq2seq", "serve", "--run", str(run), "--port", "0",
               *options]  # fmt: skip
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    for line in process.stderr:
        found = re.search(r"at (http://127\.0\.0\.1:\d+/)", line)
        if found:
            threading.Thread(target=process.stderr.read, daemon=True).start()  # keep draining
            return process, found.group(1)
    raise AssertionError(f"the server did not start (exit status {process.wait()})")
