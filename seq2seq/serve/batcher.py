"""Micro-batching: requests that arrive together are decoded together.

Beam search over 16 sentences costs far less than 16 searches over one (the matrix
products get wider, the per-step overhead is paid once), so the server does not decode a
request as soon as it arrives. A request waits in a bounded queue; one worker takes the
oldest, keeps taking whatever else arrives within `max_wait` seconds up to `max_lines`
lines, and decodes the lines of requests with equal search options in one call, in a
thread of its own so that the event loop keeps answering. Each line goes with its prefix
and its number within its own request, which seeds its samples: a line draws the same
whatever else shares its batch. A request that gives up (its timeout, or its client hung
up: its `translate` is cancelled) is skipped from the next batch of its lines on, so that
it stops costing time.

That thread should be the one that loaded the model (`executor`): PyTorch run from a thread
other than the one whose operations set its CPU threads up decoded at half the speed here
(a 2-core EPYC), whether with one request at a time or sixteen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

# lines, their prefixes ("": none), their phrases ([]: none), their numbers within their
# requests, the requests' search options, skip -> for each line, its hypotheses; called in
# the worker thread. skip(i): line i's request gave up, so its line need not be searched
# (it may get []).
Search = Callable[
    [list[str], list[str], list[list[str]], list[int], Hashable, Callable[[int], bool]],
    list[list[Any]],
]


class QueueFull(Exception):
    """More requests wait than the queue holds."""


class ShuttingDown(Exception):
    """The server is stopping and takes no new requests."""


@dataclass
class _Job:
    lines: list[str]
    prefixes: list[str]
    constraints: list[list[str]]
    options: Hashable  # how the lines are searched: only equal ones share a search
    done: asyncio.Future = field(repr=False)


class MicroBatcher:
    """Collects requests into batches and decodes them with `search` in one thread
    (`executor`'s; by default one of its own)."""

    def __init__(
        self,
        search: Search,
        max_lines: int,
        max_wait: float,
        max_queue: int,
        executor: Executor | None = None,
    ) -> None:
        self.search = search
        self.owns_executor = executor is None
        self.executor = executor or ThreadPoolExecutor(1, thread_name_prefix="decode")
        self.max_lines = max_lines
        self.max_wait = max_wait
        self.queue: asyncio.Queue[_Job] = asyncio.Queue(max_queue)
        self.batches = 0  # decoded so far: for /health and tests
        self.collecting = 0  # jobs taken into the batch that `_collect` is still filling
        self.closing = False
        self._worker: asyncio.Task | None = None

    @property
    def waiting(self) -> int:
        """Requests not yet being decoded: in the queue or in the batch being collected."""
        return self.queue.qsize() + self.collecting

    def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Refuse new requests, finish those queued, then stop the worker."""
        self.closing = True
        if self._worker is not None:
            await self.queue.join()
            self._worker.cancel()
        if self.owns_executor:
            self.executor.shutdown(wait=False)

    async def translate(
        self,
        lines: list[str],
        options: Hashable,
        prefixes: list[str] | None = None,
        constraints: list[list[str]] | None = None,
    ) -> list[list[Any]]:
        """The hypotheses of each line (with its prefix and its phrases, if `prefixes` and
        `constraints` give them), searched as `options` say, once a batch that holds them
        is decoded."""
        if self.closing:
            raise ShuttingDown
        given = prefixes or [""] * len(lines)
        phrases = constraints or [[] for _ in lines]
        job = _Job(lines, given, phrases, options, asyncio.get_running_loop().create_future())
        try:
            self.queue.put_nowait(job)
        except asyncio.QueueFull:
            raise QueueFull from None
        return await job.done

    async def _run(self) -> None:
        while True:
            jobs = await self._collect()
            try:
                for options in dict.fromkeys(job.options for job in jobs):
                    await self._decode([job for job in jobs if job.options == options])
            finally:
                for _ in jobs:
                    self.queue.task_done()

    async def _collect(self) -> list[_Job]:
        """The oldest job and those that come within `max_wait` of it, up to `max_lines`
        lines (one job larger than that goes alone)."""
        jobs = [await self.queue.get()]
        lines, self.collecting = len(jobs[0].lines), 1
        deadline = time.monotonic() + self.max_wait
        while lines < self.max_lines:
            try:
                job = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    job = await asyncio.wait_for(self.queue.get(), left)
                except asyncio.TimeoutError:
                    break
            jobs.append(job)
            lines, self.collecting = lines + len(job.lines), len(jobs)
        self.collecting = 0
        return jobs

    async def _decode(self, jobs: list[_Job]) -> None:
        """One search over the lines of jobs with equal options; each job gets its share.
        When the search fails, each job is searched alone, so that a request that makes it
        fail fails alone."""
        jobs = [job for job in jobs if not job.done.done()]  # timed out while queued
        if not jobs:
            return
        lines = [line for job in jobs for line in job.lines]
        prefixes = [prefix for job in jobs for prefix in job.prefixes]
        phrases = [line for job in jobs for line in job.constraints]
        numbers = [number for job in jobs for number in range(len(job.lines))]
        owners = [job for job in jobs for _ in job.lines]

        def gave_up(line: int) -> bool:  # read in the worker thread: a flag, no callback
            return owners[line].done.done()

        try:
            loop = asyncio.get_running_loop()
            found = await loop.run_in_executor(
                self.executor,
                self.search,
                lines,
                prefixes,
                phrases,
                numbers,
                jobs[0].options,
                gave_up,
            )
        except Exception as error:
            if len(jobs) > 1:
                for job in jobs:
                    await self._decode([job])
            elif not jobs[0].done.done():
                jobs[0].done.set_exception(error)
            return
        self.batches += 1
        start = 0
        for job in jobs:
            share = found[start : start + len(job.lines)]
            start += len(job.lines)
            if not job.done.done():
                job.done.set_result(share)
