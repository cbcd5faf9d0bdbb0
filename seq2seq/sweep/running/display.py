"""One progress display for the runs of a sweep trained at once (`--jobs`): how many are
finished, running and left, each running run's latest log line and an estimate of the
time left. On a terminal it is a block redrawn in place; elsewhere (a log file, nohup) it
is printed every minute. What happens to a run (started, finished, failed) is a line of
its own, kept above the block."""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from typing import TextIO

from seq2seq.train.logs import duration_words

_REDRAW_S = 1.0  # on a terminal
_PRINT_S = 60.0  # elsewhere


@dataclass(frozen=True)
class Running:
    name: str
    started: float  # time.monotonic()
    latest: str  # its latest console line


def time_left(durations: list[float], running: list[float], left: int, slots: int) -> float | None:
    """Seconds until the last run ends, from the mean duration of the runs trained so far:
    what the running runs (`running`: their elapsed seconds) still need and the runs left,
    shared among `slots` processes. None until a run has finished."""
    if not durations:
        return None
    mean = sum(durations) / len(durations)
    work = sum(max(mean - elapsed, 0.0) for elapsed in running) + left * mean
    return work / max(slots, 1)


class SweepDisplay:
    def __init__(self, name: str, slots: int, stream: TextIO | None = None) -> None:
        self.name, self.slots = name, slots
        self.stream = stream or sys.stderr  # read now: a test captures it
        self.terminal = self.stream.isatty()
        self.durations: list[float] = []  # of the runs trained to their end here
        self._drawn = 0  # lines of the block on the terminal
        self._shown = 0.0 if self.terminal else time.monotonic()

    def event(self, text: str) -> None:
        self._erase()
        print(f"sweep {self.name}: {text}", file=self.stream, flush=True)

    def show(self, running: list[Running], finished: int, left: int) -> None:
        now = time.monotonic()
        if now - self._shown < (_REDRAW_S if self.terminal else _PRINT_S):
            return
        self._shown = now
        eta = time_left(self.durations, [now - run.started for run in running], left, self.slots)
        head = f"{finished} finished, {len(running)} running, {left} left"
        lines = [
            f"sweep {self.name}: {head}" + (f"; about {duration_words(eta)} left" if eta else "")
        ]
        for run in running:
            lines.append(f"  {run.name} ({duration_words(now - run.started)}): {run.latest}")
        self._erase()
        if self.terminal:
            width = shutil.get_terminal_size().columns - 1  # a wrapped line would count twice
            lines = [line[:width] for line in lines]
            self._drawn = len(lines)
        print("\n".join(lines), file=self.stream, flush=True)

    def _erase(self) -> None:
        if self._drawn:  # up to the block's first line, and clear to the end of the screen
            print(f"\x1b[{self._drawn}F\x1b[J", end="", file=self.stream, flush=True)
            self._drawn = 0
