"""`seq2seq serve` driven over ASGI in process, with a translator that says when its
search starts and a client that says when it leaves, so that the order of events is
explicit rather than timed: a request whose client hung up is dropped, as one that timed
out is, whether it waits in the queue or is being searched; an answer is built off the
event loop, so that other requests are answered meanwhile."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
import torch

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")

from seq2seq.config import DecodeConfig, SourceTags  # noqa: E402
from seq2seq.decode.translate import Translation  # noqa: E402
from seq2seq.serve.app import create_app  # noqa: E402
from seq2seq.serve.schema import ServeLimits  # noqa: E402


class HeldSearch:
    """A translator whose search records its lines and, for a line `held`, waits until
    `release` is set or the line's request gives up (then records that it did); and whose
    answer, once it is being built, waits until `answered` is set."""

    def __init__(self, held: str = "") -> None:
        self.decode, self.tags = DecodeConfig(beam=1), SourceTags()
        self.held = held
        self.started = threading.Event()
        self.release = threading.Event()
        self.searched: list[list[str]] = []
        self.skipped: list[str] = []
        self.building = threading.Event()
        self.answered = threading.Event()
        self.answered_in_time = False

    def hypotheses(self, lines, nbest, attention, served, **options) -> list[list[Translation]]:
        self.searched.append(lines)
        skip = served.skip
        if self.held in lines:
            self.started.set()
            for _ in range(500):  # at most 5 s
                if self.release.wait(0.01) or skip(lines.index(self.held)):
                    break
            self.skipped += [line for i, line in enumerate(lines) if skip(i)]
        return [[Translation(line.upper(), -1.0, [1], torch.eye(2))] for line in lines]

    def attention_record(self, source: str, found: Translation) -> dict:
        self.building.set()
        self.answered_in_time = self.answered.wait(5)
        labels = {"source": [source, "</s>"], "target": [found.text, "</s>"], "heads": None}
        return labels | {"weights": found.attention.tolist()}


async def ask(
    app, line: str, hung_up: asyncio.Event | None = None, attention: bool = False
) -> int | None:
    """POST /translate of one line; its status (see `call`)."""
    body = json.dumps({"text": [line], "attention": attention}).encode()
    return await call(app, "POST", "/translate", body, hung_up)


async def call(
    app, method: str, path: str, body: bytes, hung_up: asyncio.Event | None
) -> int | None:
    """A request to the app; its status, or None when the client hung up (once `hung_up`
    is set) before an answer came."""
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": b"", "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000),
    }  # fmt: skip
    sent = []

    async def receive():
        if messages:
            return messages.pop()
        await (hung_up or asyncio.Event()).wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"] if sent else None


def run_app(search: HeldSearch, scenario) -> None:
    limits = ServeLimits(batch_lines=1, batch_wait=0)  # one request per batch
    app = create_app(search, {"versions": {"seq2seq": "test"}}, limits)

    async def main():
        async with app.router.lifespan_context(app):
            await asyncio.wait_for(scenario(app), 20)

    asyncio.run(main())


def test_a_request_whose_client_hung_up_while_it_was_queued_is_not_searched():
    search = HeldSearch("first")

    async def scenario(app):
        first = asyncio.ensure_future(ask(app, "first"))
        await asyncio.to_thread(search.started.wait, 5)  # the worker is busy with `first`
        hung_up = asyncio.Event()
        gone = asyncio.ensure_future(ask(app, "gone", hung_up))
        await asyncio.sleep(0.05)  # `gone` is read and queued (it is not searched either way)
        hung_up.set()
        assert await gone is None
        search.release.set()
        assert await first == 200
        assert await ask(app, "next") == 200

    run_app(search, scenario)
    assert search.searched == [["first"], ["next"]]


def test_a_request_whose_client_hangs_up_during_its_search_is_skipped():
    search = HeldSearch("gone")

    async def scenario(app):
        hung_up = asyncio.Event()
        gone = asyncio.ensure_future(ask(app, "gone", hung_up))
        await asyncio.to_thread(search.started.wait, 5)
        hung_up.set()  # the search waits for its line to be skipped (5 s at most)
        assert await gone is None
        assert await ask(app, "next") == 200

    run_app(search, scenario)
    assert search.skipped == ["gone"] and search.searched == [["gone"], ["next"]]


def test_an_answer_is_built_off_the_event_loop_so_that_others_are_answered_meanwhile():
    search = HeldSearch()

    async def scenario(app):
        large = asyncio.ensure_future(ask(app, "large", attention=True))
        await asyncio.to_thread(search.building.wait, 5)  # its answer waits for `answered`
        assert await call(app, "GET", "/health", b"", None) == 200
        search.answered.set()
        assert await large == 200

    run_app(search, scenario)
    assert search.answered_in_time  # else the answer held the loop, /health waited 5 s
