"""The micro-batcher of `seq2seq serve`: requests that arrive together share one search."""

from __future__ import annotations

import asyncio
import threading

import pytest

from seq2seq.serve.batcher import MicroBatcher, QueueFull, ShuttingDown


class Recorder:
    """A search that echoes each line `nbest` times and records every call it gets (its
    options are (beam, nbest)), and the prefixes, phrases and numbers of its lines."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls: list[tuple[list[str], int, int]] = []
        self.lines: list[tuple[list[str], list[list[str]], list[int]]] = []
        self.gate = gate
        self.started = threading.Event()

    def __call__(self, lines, prefixes, phrases, numbers, options, skip=None) -> list[list[str]]:
        self.started.set()
        if self.gate is not None:
            self.gate.wait(5)
        beam, nbest = options
        self.calls.append((lines, beam, nbest))
        self.lines.append((prefixes, phrases, numbers))
        return [[f"{line}/{beam}/{rank}" for rank in range(nbest)] for line in lines]


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 10))


def test_requests_that_arrive_together_are_one_search_and_get_their_own_lines():
    search = Recorder()

    async def scenario():
        batcher = MicroBatcher(search, max_lines=100, max_wait=0.2, max_queue=10)
        batcher.start()
        asks = [(["a", "b"], 5, 1), (["c"], 5, 1), (["d", "e", "f"], 5, 1)]
        answers = await asyncio.gather(*(batcher.translate(x, (b, n)) for x, b, n in asks))
        await batcher.stop()
        return answers

    answers = run(scenario())
    assert answers == [[["a/5/0"], ["b/5/0"]], [["c/5/0"]], [["d/5/0"], ["e/5/0"], ["f/5/0"]]]
    assert search.calls == [(["a", "b", "c", "d", "e", "f"], 5, 1)]


def test_each_line_goes_with_its_prefix_phrases_and_number_within_its_own_request():
    """The number seeds a line's samples: a line draws the same, whatever shares its batch."""
    search = Recorder()

    async def scenario():
        batcher = MicroBatcher(search, max_lines=100, max_wait=0.2, max_queue=10)
        batcher.start()
        await asyncio.gather(
            batcher.translate(["a", "b"], (1, 1), ["A", ""]), batcher.translate(["c"], (1, 1)),
            batcher.translate(["d", "e"], (1, 1), ["D", "E"], [["x"], ["y", "z"]]),
        )  # fmt: skip
        await batcher.stop()

    run(scenario())
    assert search.calls == [(["a", "b", "c", "d", "e"], 1, 1)]
    phrases = [[], [], [], ["x"], ["y", "z"]]
    assert search.lines == [(["A", "", "", "D", "E"], phrases, [0, 1, 0, 0, 1])]


def test_different_search_options_are_searched_apart_in_arrival_order():
    search = Recorder()

    async def scenario():
        batcher = MicroBatcher(search, max_lines=100, max_wait=0.2, max_queue=10)
        batcher.start()
        asks = [(["a"], 5, 1), (["b"], 2, 2), (["c"], 5, 1)]
        answers = await asyncio.gather(*(batcher.translate(x, (b, n)) for x, b, n in asks))
        await batcher.stop()
        return answers

    assert run(scenario()) == [[["a/5/0"]], [["b/2/0", "b/2/1"]], [["c/5/0"]]]
    assert search.calls == [(["a", "c"], 5, 1), (["b"], 2, 2)]


def test_a_batch_stops_growing_at_max_lines():
    search = Recorder()

    async def scenario():
        batcher = MicroBatcher(search, max_lines=3, max_wait=0.2, max_queue=10)
        batcher.start()
        await asyncio.gather(*(batcher.translate([str(i), str(i)], (1, 1)) for i in range(3)))
        await batcher.stop()

    run(scenario())
    assert [len(lines) for lines, _, _ in search.calls] == [4, 2]  # 2 + 2 reach 3; then 2


def test_waiting_counts_the_batch_being_collected_until_its_search_starts():
    gate = threading.Event()
    search = Recorder(gate)

    async def scenario():
        batcher = MicroBatcher(search, max_lines=100, max_wait=1.0, max_queue=10)
        batcher.start()
        asks = [asyncio.ensure_future(batcher.translate([line], (1, 1))) for line in "ab"]
        await asyncio.sleep(0.1)  # both taken from the queue into the batch, which waits on
        collecting = (batcher.queue.qsize(), batcher.waiting)
        while not search.started.is_set():
            await asyncio.sleep(0.01)
        searching = batcher.waiting
        gate.set()
        await asyncio.gather(*asks)
        await batcher.stop()
        return collecting, searching

    assert run(scenario()) == ((0, 2), 0)


def test_a_full_queue_refuses_and_a_stopping_batcher_finishes_what_it_holds():
    gate = threading.Event()
    search = Recorder(gate)

    async def scenario():
        batcher = MicroBatcher(search, max_lines=1, max_wait=0, max_queue=1)
        batcher.start()
        first = asyncio.ensure_future(batcher.translate(["a"], (1, 1)))
        await asyncio.to_thread(search.started.wait, 5)  # `a` is in its (held) search
        second = asyncio.ensure_future(batcher.translate(["b"], (1, 1)))
        await asyncio.sleep(0.05)
        with pytest.raises(QueueFull):
            await batcher.translate(["c"], (1, 1))
        stopping = asyncio.ensure_future(batcher.stop())
        await asyncio.sleep(0.05)
        with pytest.raises(ShuttingDown):
            await batcher.translate(["d"], (1, 1))
        gate.set()
        await stopping
        return await first, await second

    assert run(scenario()) == ([["a/1/0"]], [["b/1/0"]])


def test_a_request_whose_search_fails_fails_alone_and_the_next_batch_works():
    calls = []

    def search(lines, prefixes, phrases, numbers, options, skip):
        calls.append(lines)
        if "boom" in lines:
            raise RuntimeError("boom")
        return [[line] for line in lines]

    async def scenario():
        batcher = MicroBatcher(search, max_lines=10, max_wait=0.1, max_queue=10)
        batcher.start()
        answers = await asyncio.gather(
            batcher.translate(["x"], (1, 1)), batcher.translate(["boom"], (1, 1)),
            batcher.translate(["y", "z"], (1, 1)), return_exceptions=True,
        )  # fmt: skip
        after = await batcher.translate(["w"], (1, 1))
        await batcher.stop()
        return answers, after

    (first, failed, third), after = run(scenario())
    assert first == [["x"]] and third == [["y"], ["z"]] and after == [["w"]]
    assert isinstance(failed, RuntimeError)
    # The shared search failed; then each request was searched on its own.
    assert calls == [["x", "boom", "y", "z"], ["x"], ["boom"], ["y", "z"], ["w"]]


def test_the_search_is_told_which_lines_belong_to_a_request_that_gave_up():
    gate = threading.Event()
    seen = []

    def search(lines, prefixes, phrases, numbers, options, skip):
        gate.wait(5)  # both requests are in this search when the first gives up
        seen.append([skip(i) for i in range(len(lines))])
        return [[line] for line in lines]

    async def scenario():
        # Three lines fill a batch at once, whatever the machine's speed; "c" is queued first.
        batcher = MicroBatcher(search, max_lines=3, max_wait=5, max_queue=10)
        batcher.start()
        kept = asyncio.ensure_future(batcher.translate(["c"], (1, 1)))
        await asyncio.sleep(0)  # `translate` queues its job at its first step
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(batcher.translate(["a", "b"], (1, 1)), 0.3)
        gate.set()
        answer = await kept
        await batcher.stop()
        return answer

    assert run(scenario()) == [["c"]]
    assert seen == [[False, True, True]]  # c came first; a and b gave up


def test_a_request_that_gave_up_while_queued_is_not_searched():
    gate = threading.Event()
    search = Recorder(gate)

    async def scenario():
        batcher = MicroBatcher(search, max_lines=1, max_wait=0, max_queue=10)
        batcher.start()
        first = asyncio.ensure_future(batcher.translate(["a"], (1, 1)))
        await asyncio.to_thread(search.started.wait, 5)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(batcher.translate(["late"], (1, 1)), 0.05)
        gate.set()
        await first
        await batcher.stop()

    run(scenario())
    assert search.calls == [(["a"], 1, 1)]
