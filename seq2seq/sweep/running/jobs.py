"""`seq2seq sweep --jobs N`: up to N runs at once on this machine, each in a worker process
(worker.py) with its share of the CPU threads and, where GPUs are visible, a GPU (K runs on
each with --jobs-per-gpu K). A stop signal is passed on to every worker, each of which
stops the way `seq2seq train` stops (saved, resumable), and no run starts after it.

Workers run in sessions of their own, so that Ctrl-C reaches each once, through the sweep:
a second signal from the terminal would otherwise stop them at once, unsaved."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from seq2seq.checkpoint import RunBusy, lock_holder
from seq2seq.errors import UserError
from seq2seq.processes import PARENT_VARIABLE, same_code_environment
from seq2seq.sweep.directory import SweepDir
from seq2seq.sweep.running.display import Running, SweepDisplay
from seq2seq.sweep.running.one_run import Outcome, Status
from seq2seq.sweep.running.worker import EXIT_STATUS, command
from seq2seq.sweep.spec import Run
from seq2seq.train.interrupt import STOP_SIGNALS, Interrupted

_POLL_S = 0.2
_ENDINGS = {code: status for status, code in EXIT_STATUS.items() if status is not Status.SKIPPED}


@dataclass(frozen=True)
class Slot:
    gpu: str | None  # the CUDA_VISIBLE_DEVICES of its runs; None: no GPU
    threads: int


def plan_slots(
    jobs: int | None, jobs_per_gpu: int | None, gpus: list[str], cores: int, runs: int
) -> list[Slot]:
    """A slot per run trained at once: at most `jobs` (without it, `jobs_per_gpu` on each
    GPU) and at most `runs`; the GPUs in turn, so that fewer runs than slots spread over
    every GPU (`jobs` alone: as few on each as hold them all); the `cores` shared."""
    if jobs_per_gpu is not None and not gpus:
        raise UserError(
            "--jobs-per-gpu puts several runs on each GPU, and no GPU is visible; "
            "pass --jobs N alone to train N runs at once on the CPU"
        )
    if jobs_per_gpu is not None and jobs is not None and jobs > len(gpus) * jobs_per_gpu:
        raise UserError(
            f"--jobs {jobs} is more runs at once than {len(gpus)} GPU(s) x {jobs_per_gpu} per "
            f"GPU; pass --jobs-per-gpu {math.ceil(jobs / len(gpus))}, or --jobs alone"
        )
    per_gpu = jobs_per_gpu or (math.ceil(jobs / len(gpus)) if jobs and gpus else 1)
    jobs = jobs or len(gpus) * per_gpu
    order = [gpu for _ in range(per_gpu) for gpu in gpus] if gpus else [None] * jobs
    count = max(1, min(jobs, runs))
    return [Slot(gpu, max(1, cores // count)) for gpu in order[:count]]


def visible_gpus(runs: list[Run]) -> list[str]:
    """The GPUs the runs may be spread over (CUDA_VISIBLE_DEVICES's names for them); none
    where every run trains on the CPU."""
    if all(run.config.train.device == "cpu" for run in runs):
        return []
    count = torch.cuda.device_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [name.strip() for name in listed.split(",")] if listed is not None else []
    return names[:count] if listed is not None else [str(index) for index in range(count)]


@dataclass
class _Worker:
    run: Run
    slot: int  # its index in the pool's slots
    process: subprocess.Popen
    started: float = field(default_factory=time.monotonic)
    latest: str = "starting"  # its latest console line
    signals: int = 0  # stop signals passed on to it
    reader: threading.Thread | None = None  # of its stderr

    def read(self) -> None:
        for line in self.process.stderr:
            if line.strip():
                self.latest = line.rstrip()

    def listen(self) -> None:
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def close(self) -> None:
        """After it ended: its last lines read, its pipe closed."""
        self.reader.join(timeout=10)  # a descendant that kept the pipe open: give up
        self.process.stderr.close()

    @property
    def stopped(self) -> bool:
        """Whether it ended on a stop signal: saved as `seq2seq train` saves (128 + N), or
        killed by it before training began (-N)."""
        code = self.process.returncode
        return any(code in (128 + number, -number) for number in STOP_SIGNALS)

    def outcome(self) -> Outcome:
        code = self.process.returncode
        status = _ENDINGS.get(code)
        message = self.latest.removeprefix("seq2seq: error: ").removeprefix("seq2seq: ")
        if status is Status.TRAINED:
            return Outcome(status)
        if status is not None:
            return Outcome(status, message)
        return Outcome(Status.FAILED, f"ended with exit status {code}: {message}")


class JobPool:
    """Trains `runs` in worker processes, a run per slot at a time."""

    def __init__(self, directory: SweepDir, runs: list[Run], slots: list[Slot], name: str):
        self.directory, self.waiting, self.slots = directory, list(runs), slots
        self.free = list(range(len(slots)))  # the slots no worker holds, by index
        self.total = len(runs)
        self.display = SweepDisplay(name, len(slots))
        self.workers: list[_Worker] = []
        self.outcomes: dict[str, Outcome] = {}
        self.stopped: list[str] = []
        self.signal: int | None = None  # the stop signal received
        self.received = 0  # how many

    def run(self) -> dict[str, Outcome]:
        """Each run's outcome by name; raises Interrupted, once every worker has ended,
        where a stop signal came."""
        with self._passing_on_signals():
            while self.workers or (self.waiting and self.signal is None):
                self._start_free_slots()
                self._reap()
                running = [Running(w.run.name, w.started, w.latest) for w in self.workers]
                self.display.show(running, len(self.outcomes), len(self.waiting))
                time.sleep(_POLL_S)
        if self.signal is not None:
            name = signal.Signals(self.signal).name
            raise Interrupted(
                self.signal,
                f"sweep stopped by {name}: {len(self.stopped)} run(s) saved where they stopped, "
                f"{len(self.waiting)} not started; resume with the same command",
            )
        return self.outcomes

    def _start_free_slots(self) -> None:
        while self.free and self.waiting and self.signal is None:
            run = self.waiting.pop(0)
            place = self.directory.run(run)
            if holder := lock_holder(place):  # refused here, not by a worker started to say so
                busy = Outcome(Status.BUSY, str(RunBusy.of(place, holder)))
                self.outcomes[run.name] = busy
                self.display.event(f"{run.name} skipped: {busy.message}")
                continue
            self._start(run, self.free.pop(0))

    def _start(self, run: Run, index: int) -> None:
        slot = self.slots[index]
        environ = same_code_environment(dict(os.environ))
        environ[PARENT_VARIABLE] = str(os.getpid())  # the worker dies with the sweep
        if slot.gpu is not None:
            environ["CUDA_VISIBLE_DEVICES"] = slot.gpu
        process = subprocess.Popen(
            command(self.directory.root, run.name, slot.threads),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=environ,
            start_new_session=True,  # signals come through the sweep (module docstring)
        )
        worker = _Worker(run, index, process)
        self.workers.append(worker)
        worker.listen()
        self._pass_on(worker)  # a signal that came while it started
        where = f"GPU {slot.gpu}, " if slot.gpu is not None else ""
        number = self.total - len(self.waiting)
        threads = f"{where}{slot.threads} CPU thread(s)"
        self.display.event(f"[{number}/{self.total}] {run.name}: started ({threads})")

    def _reap(self) -> None:
        for worker in [w for w in self.workers if w.process.poll() is not None]:
            self.workers.remove(worker)
            self.free.append(worker.slot)
            worker.close()
            outcome, name = worker.outcome(), worker.run.name
            took = time.monotonic() - worker.started
            if worker.stopped and self.signal is not None:  # else stopped alone: it failed
                self.stopped.append(name)
                self.display.event(f"{name}: {worker.latest.removeprefix('seq2seq: ')}")
                continue
            self.outcomes[name] = outcome
            if outcome.status is Status.TRAINED:
                self.display.durations.append(took)
                self.display.event(f"{name}: finished in {took / 60:.1f} min")
            else:
                verb = "skipped" if outcome.status is Status.BUSY else "failed"
                self.display.event(f"{name} {verb}: {outcome.message}")

    def _pass_on(self, worker: _Worker) -> None:
        while self.signal is not None and worker.signals < self.received:
            worker.signals += 1
            worker.process.send_signal(self.signal)

    @contextmanager
    def _passing_on_signals(self) -> Iterator[None]:
        def handle(number: int, frame: object) -> None:
            self.signal, self.received = number, self.received + 1
            for worker in self.workers:
                self._pass_on(worker)

        previous = {number: signal.signal(number, handle) for number in STOP_SIGNALS}
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
