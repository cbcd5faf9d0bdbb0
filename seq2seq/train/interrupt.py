"""SIGINT and SIGTERM stop training between two updates, so that it can save and exit.

The first signal is recorded and the training loop stops after its current update; a
second one interrupts at once (KeyboardInterrupt), for a user who does not want to wait.
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

    def __init__(self) -> None:
        self.received: int | None = None
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
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = number

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received else ""
