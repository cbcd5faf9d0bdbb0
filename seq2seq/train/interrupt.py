"""SIGINT and SIGTERM stop training between two updates, so that it can save and exit.

The first signal is recorded and the training loop stops after its current update; a
second one interrupts at once, for a user who does not want to wait. Where there is
nothing to save (the test decode after training), the first signal interrupts at once.
Either way the command ends with one line saying what was kept, and exit status 128 + N.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """Training stopped on a signal after saving a checkpoint to resume from."""

    def __init__(self, signal_number: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = 128 + signal_number


class StopSignals:
    """While active, SIGINT and SIGTERM set `received` instead of killing the process."""

    def __init__(self, at_once: str | None = None) -> None:
        """`at_once`: stop at the first signal, with this message."""
        self.received: int | None = None
        self.at_once = at_once
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        # Signal handlers can only be installed from the main thread; elsewhere (a test
        # runner's worker thread) signals keep their default behaviour.
        if threading.current_thread() is threading.main_thread():
            for number in STOP_SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if self.at_once is not None:
            raise Interrupted(number, f"stopped by {signal.Signals(number).name} {self.at_once}")
        if self.received is not None:
            raise Interrupted(
                number,
                f"stopped at once by a second {signal.Signals(number).name}; "
                "resume from the last saved checkpoint with the same command",
            )
        self.received = number

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received else ""
