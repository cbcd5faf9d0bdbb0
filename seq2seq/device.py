"""Which device a run or a translator computes on."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import os
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from seq2seq.errors import ResourceError, UserError

# glibc's mallopt parameters (malloc.h) and what they are set to: keep freed blocks of up to
# 1 GiB in the heap for the next tensor rather than unmapping them.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_HEAP_KEEPS = 1 << 30


def pick_device(name: str = "auto") -> torch.device:
    """`auto` (CUDA when available, else the CPU), `cpu` or `cuda`; on the CPU, the
    allocator is first told to reuse freed memory (`reuse_freed_host_memory`)."""
    if name not in ("auto", "cpu", "cuda"):
        raise UserError(f"device {name!r} is not one of auto, cpu, cuda; pick one of those")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("the device is cuda but no CUDA device is available; use auto or cpu")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        reuse_freed_host_memory()
    return torch.device(name)


# More threads than this per usable CPU only wait for each other, and OpenMP runtimes abort
# or crash on tens of thousands (libgomp at 16,384).
THREADS_PER_CPU = 4


def usable_cpus() -> int:
    """The CPUs this process may use (its affinity mask, which `taskset` and cpusets
    narrow; not every core of the machine)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return usable or 1


def default_threads(processes: int = 1) -> int:
    """The usable CPUs, shared among `processes`."""
    return max(1, usable_cpus() // processes)


def use_threads(threads: int | None, processes: int = 1) -> int:
    """Compute on `threads` CPU threads (None: `default_threads(processes)`); returns how
    many. The count changes speed, not results beyond float rounding: a sum split over
    more threads adds in another order, so the last bits of a result may differ."""
    whole = isinstance(threads, int) and not isinstance(threads, bool)
    if threads is not None and not (whole and threads >= 1):
        raise UserError(f"threads={threads!r}: give a whole number of CPU threads, 1 or more")
    limit = THREADS_PER_CPU * usable_cpus()
    if threads is not None and threads > limit:
        raise UserError(
            f"threads={threads}: at most {limit} ({THREADS_PER_CPU} per CPU this process may "
            f"use, {usable_cpus()} here); give {usable_cpus()} or fewer for speed"
        )
    count = threads or default_threads(processes)
    torch.set_num_threads(count)
    return count


def free_cpus() -> int:
    """The usable CPUs that other processes leave free now, at least 1.

    free = max(1, usable - max(others - outside, 0)), where `others` is the tasks of
    other processes runnable at this moment (/proc/loadavg's count of runnable tasks, less
    this process's own running threads; the median of three looks 1 ms apart, so that a
    task passing by is not counted) and `outside` the machine's CPUs outside this process's
    mask, which are taken to serve others first. Without /proc: `usable_cpus()`.
    """
    usable, looks = usable_cpus(), []
    for look in range(3):
        if look:
            time.sleep(0.001)
        others = _others_running()
        if others is None:
            return usable
        looks.append(others)
    outside = max((os.cpu_count() or usable) - usable, 0)
    return max(1, usable - max(sorted(looks)[1] - outside, 0))


def _others_running() -> int | None:
    """Runnable tasks of other processes now; None where /proc does not say."""
    try:
        with open("/proc/loadavg", encoding="ascii") as loadavg:
            running = int(loadavg.read().split()[3].split("/")[0])
        own = _own_running()
    except (OSError, IndexError, ValueError):
        return None
    return max(running - own, 0)


def _own_running() -> int:
    """This process's threads that are runnable now (state R in /proc/self/task)."""
    running = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat", encoding="ascii", errors="replace") as f:
                running += f.read().rpartition(")")[2].split()[0] == "R"
        except (OSError, IndexError):  # the thread ended meanwhile
            pass
    return running


class FreeCpuThreads:
    """CPU threads that follow the CPUs other work leaves free (`free_cpus`), for decoding,
    which would otherwise keep threads that wait on each other while other processes hold
    the cores: on 2 cores busy with two other processes, 2 threads decoded 4x slower than 1
    (docs/benchmarks.md). `follow()`, called before each batch from the thread that decodes
    (OpenMP's thread count is that thread's), looks again at most every `every` seconds."""

    def __init__(self, every: float = 2.0) -> None:
        self.every = every
        self._looked = -math.inf

    def follow(self) -> None:
        now = time.monotonic()
        if now - self._looked < self.every:
            return
        self._looked = now
        count = free_cpus()
        if count != torch.get_num_threads():
            torch.set_num_threads(count)


@functools.cache
def reuse_freed_host_memory() -> bool:
    """Make glibc keep freed tensor memory for reuse; False where the C library is not glibc.

    By default glibc serves each block over 128 KiB (a (B, S, H) activation, logits) with a
    fresh mmap and returns it to the system when freed, so every training or decoding step
    pays page faults to zero the same memory again (on a busy 2-core machine, up to a third
    of the study RNN's step). Raising the mmap and trim thresholds keeps the memory in the
    heap instead; the resident memory stays at its peak, which it reaches anyway. Results
    do not change.
    """
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):  # no C library by that name, or not glibc
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _HEAP_KEEPS) and mallopt(_M_TRIM_THRESHOLD, _HEAP_KEEPS))


def out_of_memory(error: BaseException) -> bool:
    """Whether an exception says memory ran out: CUDA's, or the CPU allocator's."""
    if isinstance(error, MemoryError | torch.OutOfMemoryError):
        return True
    return isinstance(error, RuntimeError) and "alloc" in str(error).lower()


@contextmanager
def out_of_memory_reported(message: Callable[[], str]) -> Iterator[None]:
    """Running out of memory within is a one-line `ResourceError` saying `message()` (made
    when it happens, so that it can name the step); other errors pass through."""
    try:
        yield
    except (RuntimeError, MemoryError) as error:
        if not out_of_memory(error):
            raise
        raise ResourceError(message()) from None


def machine(device: torch.device) -> dict[str, str | int | None]:
    """What a run computes on: the CPU's model, its CPU count and the GPU's name. A run
    repeats float for float on the same commit, seed and threads only on the same kind of
    CPU (or GPU): another one's kernels round sums differently."""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {"cpu": _cpu_model(), "cpus": os.cpu_count(), "gpu": gpu}


def machine_label(recorded: dict) -> str:
    """A machine of meta.json in words: "CPU model", or "CPU model with GPU name"."""
    gpu = recorded.get("gpu")
    return f"{recorded.get('cpu')}" + (f" with {gpu}" if gpu else "")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()  # not Linux, or no model name


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX-512 BF16 or AMX), as oneDNN sees it."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def check_precision(precision: str, device: torch.device) -> None:
    """Refuse a precision where it cannot run: fp16's gradient scaling is CUDA's; oneDNN has
    no bf16 LSTM without native support, emulated bf16 matrix products are slower than
    fp32, and GPUs before Ampere have no bf16."""
    if precision == "fp16" and device.type != "cuda":
        raise UserError(
            f"train.precision is fp16, which needs a CUDA GPU (its gradient scaling is "
            f"CUDA's), but the device is {device.type}; set train.precision: fp32 (or bf16 "
            "on a CPU that has it)"
        )
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UserError(
            "train.precision is bf16 but this GPU has no bf16 (it needs compute capability "
            "8.0 or later); set train.precision: fp16"
        )
    if precision == "bf16" and device.type == "cpu" and not cpu_has_bf16():
        raise UserError(
            "train.precision is bf16 but this CPU has no native bf16 (AVX-512 BF16 or AMX); "
            "set train.precision: fp32 here, or train on a GPU or a CPU that has it"
        )
