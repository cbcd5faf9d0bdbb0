"""The micro-batcher of `seq2seq serve`: requests that arrive together share one search."""

from __future__ import annotations

import asyncio
import threading

import pytest

from seq2seq.serve.batcher import MicroBatcher, QueueFull, ShuttingDown


class Recorder:
    """A search that echoes each line `nbest` times and records every call it gets."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls: list[tuple[list[str], int, int]] = []
        self.gate = gate
        self.started = threading.Event()

    def __call__(self, lines: list[str], beam: int, nbest: int, attention: bool) -> list[list[str]]:
        self.started.set()
        if self.gate is not None:
            self.gate.wait(5)
        self.calls.append((lines, beam, nbest))
        return [[f"{line}/{beam}/{rank}" for rank in range(nbest)] for line in lines]


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 10))


def test_requests_that_arrive_together_are_one_search_and_get_their_own_lines():
    search = Recorder()

    async def scenario():
        batcher = MicroBatcher(search, max_lines=100, max_wait=0.2, max_queue=10)
        batcher.start()
        asks = [(["a", "b"], 5, 1), (["c"], 5, 1), (["d", "e", "f"], 5, 1)]
        answers = await asyncio.gather(*(batcher.translate(*ask) for ask in asks))
        await batcher.stop()
        return answers

    answers = run(scenario())
    assert answers == [[["a/5/0"], ["b/5/0"]], [["c/5/0"]], [["d/5/0"], ["e/5/0"], ["f/5/0"]]]
    assert search.calls == [(["a", "b", "c", "d", "e", "f"], 5, 1)]


def test_different_search_options_are_searched_apart_in_arrival_order():
    search = Recorder()

    async def scenario():
        batcher = MicroBatcher(search, max_lines=100, max_wait=0.2, max_queue=10)
        batcher.start()
        asks = [(["a"], 5, 1), (["b"], 2, 2), (["c"], 5, 1)]
        answers = await asyncio.gather(*(batcher.translate(*ask) for ask in asks))
        await batcher.stop()
        return answers

    assert run(scenario()) == [[["a/5/0"]], [["b/2/0", "b/2/1"]], [["c/5/0"]]]
    assert search.calls == [(["a", "c"], 5, 1), (["b"], 2, 2)]


def test_a_batch_stops_growing_at_max_lines():
    search = Recorder()

    async def scenario():
        batcher = MicroBatcher(search, max_lines=3, max_wait=0.2, max_queue=10)
        batcher.start()
        await asyncio.gather(*(batcher.translate([str(i), str(i)], 1, 1) for i in range(3)))
        await batcher.stop()

    run(scenario())
    assert [len(lines) for lines, _, _ in search.calls] == [4, 2]  # 2 + 2 reach 3; then 2


def test_a_full_queue_refuses_and_a_stopping_batcher_finishes_what_it_holds():
    gate = threading.Event()
    search = Recorder(gate)

    async def scenario():
        batcher = MicroBatcher(search, max_lines=1, max_wait=0, max_queue=1)
        batcher.start()
        first = asyncio.ensure_future(batcher.translate(["a"], 1, 1))
        await asyncio.to_thread(search.started.wait, 5)  # `a` is in its (held) search
        second = asyncio.ensure_future(batcher.translate(["b"], 1, 1))
        await asyncio.sleep(0.05)
        with pytest.raises(QueueFull):
            await batcher.translate(["c"], 1, 1)
        stopping = asyncio.ensure_future(batcher.stop())
        await asyncio.sleep(0.05)
        with pytest.raises(ShuttingDown):
            await batcher.translate(["d"], 1, 1)
        gate.set()
        await stopping
        return await first, await second

    assert run(scenario()) == ([["a/1/0"]], [["b/1/0"]])


def test_a_failed_search_fails_every_request_of_its_batch_and_the_next_batch_works():
    def search(lines, beam, nbest, attention):
        if "boom" in lines:
            raise RuntimeError("boom")
        return [[line] for line in lines]

    async def scenario():
        batcher = MicroBatcher(search, max_lines=10, max_wait=0.1, max_queue=10)
        batcher.start()
        failed = await asyncio.gather(
            batcher.translate(["boom"], 1, 1), batcher.translate(["x"], 1, 1),
            return_exceptions=True,
        )  # fmt: skip
        after = await batcher.translate(["y"], 1, 1)
        await batcher.stop()
        return failed, after

    failed, after = run(scenario())
    assert all(isinstance(error, RuntimeError) for error in failed)
    assert after == [["y"]]


def test_a_request_that_gave_up_while_queued_is_not_searched():
    gate = threading.Event()
    search = Recorder(gate)

    async def scenario():
        batcher = MicroBatcher(search, max_lines=1, max_wait=0, max_queue=10)
        batcher.start()
        first = asyncio.ensure_future(batcher.translate(["a"], 1, 1))
        await asyncio.to_thread(search.started.wait, 5)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(batcher.translate(["late"], 1, 1), 0.05)
        gate.set()
        await first
        await batcher.stop()

    run(scenario())
    assert search.calls == [(["a"], 1, 1)]
