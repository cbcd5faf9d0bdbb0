"""The HTTP API (FastAPI): `POST /translate`, `GET /health`, `GET /info` and the page at `/`.

Every error is JSON `{"error": "one line naming the problem and the fix"}`: 400 for a Host
the server does not answer to, 408 for a body that did not arrive in time, 413 for a
request over a limit, 415 for a body not sent as JSON, 422 for a malformed one (the field
named), 500 for a failure of the server on that one request, 503 when the queue is full,
504 when the answer took longer than the timeout. A request is read and checked whole
before it joins a batch, so that it fails alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from contextlib import asynccontextmanager
from importlib.resources import files
from typing import Any, TypeVar

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic_core import to_json
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import Receive

from seq2seq.decode.line_translator import LineTranslator, ServedLines, Translation
from seq2seq.device import out_of_memory
from seq2seq.serve.batcher import MicroBatcher, QueueFull, ShuttingDown
from seq2seq.serve.guards import AllowedHosts, AnswerFailures, BodyLimit
from seq2seq.serve.request import check_search, read_request
from seq2seq.serve.schema import (
    AttentionWeights,
    Hypothesis,
    LineTranslation,
    SearchOptions,
    ServeLimits,
    TranslateRequest,
    TranslateResponse,
)

T = TypeVar("T")


def create_app(
    translator: LineTranslator,
    info: dict[str, Any],
    limits: ServeLimits,
    decoder: Executor | None = None,
    allowed_hosts: frozenset[str] | None = None,
) -> FastAPI:
    """The server of one translator; `info` is what `GET /info` answers. `decoder`: the
    one-thread executor that loaded the translator, to decode in (see `MicroBatcher`).
    `allowed_hosts`: the names a request's Host header may give (None: any)."""

    batcher = MicroBatcher(
        _searcher(translator), limits.batch_lines, limits.batch_wait, limits.max_queue, decoder
    )
    app = _bare_app(info["versions"]["seq2seq"], limits, allowed_hosts, batcher)
    page = files("seq2seq.serve").joinpath("page.html").read_text(encoding="utf-8")

    @app.get("/", response_class=HTMLResponse)
    async def index() -> str:
        return page

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "queued": batcher.waiting, "batches": batcher.batches}

    @app.get("/info")
    async def model_info() -> dict[str, Any]:
        return info

    @app.post("/translate")
    async def translate(http: Request) -> Response:
        request = read_request(await http.body(), http.headers.get("content-type"), limits)
        options = check_search(request, limits, translator.decode, translator.tags)
        found = await _decode(batcher, request, options, limits.timeout, http.receive)
        # Off the event loop: an answer with attention can be hundreds of MB, seconds of
        # work during which no other request would be answered.
        beam = options.decode()["beam"]
        answer = await asyncio.to_thread(_answer, translator, request, beam, found)
        return Response(answer, media_type="application/json")

    return app


def _searcher(translator: LineTranslator) -> Callable[..., list[list[Translation]]]:
    """The batcher's search (`batcher.Search`): the translator's hypotheses of its lines."""

    def search(
        lines: list[str],
        prefixes: list[str],
        constraints: list[list[str]],
        numbers: list[int],
        options: SearchOptions,
        skip: Callable[[int], bool],
    ) -> list[list[Translation]]:
        asked = {"nbest": options.nbest, "attention": options.attention}
        asked |= {"token_scores": options.token_scores, "served": ServedLines(numbers, skip)}
        return translator.hypotheses(
            lines, prefixes=prefixes, constraints=constraints, **asked, **options.decode()
        )

    return search


def _bare_app(
    version: str, limits: ServeLimits, allowed_hosts: frozenset[str] | None, batcher: MicroBatcher
) -> FastAPI:
    """The app without its routes: the batcher's lifespan, the guards, JSON errors."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        yield
        await batcher.stop()

    # No /docs, /redoc or /openapi.json: the API is docs/serve.md, and /docs loads scripts
    # from a CDN.
    app = FastAPI(
        title="seq2seq",
        version=version,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.add_middleware(BodyLimit, limit=limits.max_body, read_timeout=limits.read_timeout)
    app.add_middleware(AllowedHosts, hosts=allowed_hosts)
    app.add_middleware(AnswerFailures)  # the outermost: it sees every failure

    @app.exception_handler(StarletteHTTPException)
    async def refused(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": error.detail}, error.status_code, error.headers)

    return app


async def _decode(
    batcher: MicroBatcher,
    request: TranslateRequest,
    options: SearchOptions,
    timeout: float,
    receive: Receive,
) -> list[list[Translation]]:
    try:
        translated = batcher.translate(request.text, options, request.prefix, request.constraints)
        return await asyncio.wait_for(_unless_hung_up(translated, receive), timeout)
    except QueueFull:
        raise HTTPException(503, "the server is busy (its queue is full); retry later") from None
    except ShuttingDown:
        raise HTTPException(503, "the server is stopping; send the request elsewhere") from None
    except asyncio.TimeoutError:
        raise HTTPException(
            504, f"no answer within {timeout:g} s; send fewer or shorter lines, or retry later"
        ) from None
    except Exception as error:
        if out_of_memory(error):
            raise HTTPException(
                503,
                "the server ran out of memory on this request; send fewer or shorter "
                "lines, or ask for a smaller beam",
            ) from None
        raise  # AnswerFailures answers it: 500


async def _unless_hung_up(work: Awaitable[T], receive: Receive) -> T:
    """`work`'s result; ClientDisconnect once the client hangs up, `work` then cancelled:
    the batcher drops the request of a client that left as it drops one that timed out."""
    task = asyncio.ensure_future(work)
    hung_up = asyncio.ensure_future(_disconnect(receive))
    try:
        done, _ = await asyncio.wait((task, hung_up), return_when=asyncio.FIRST_COMPLETED)
    finally:
        hung_up.cancel()
        task.cancel()  # nothing once it is done
    if task not in done:
        raise ClientDisconnect
    return task.result()


async def _disconnect(receive: Receive) -> None:
    """Returns when the client hangs up (its body has all been read: nothing else comes)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _answer(
    translator: LineTranslator, request: TranslateRequest, beam: int, found: list[list[Translation]]
) -> bytes:
    """The JSON of a `TranslateResponse`, written line by line: one call over an answer of
    hundreds of MB would hold the GIL, and so the event loop, for seconds."""
    lines = [
        to_json(_line(translator, source, hyps, request))
        for source, hyps in zip(request.text, found, strict=True)
    ]
    head, tail = to_json(TranslateResponse(translations=[], beam=beam)).split(b"[]", 1)
    return head + b"[" + b",".join(lines) + b"]" + tail


def _line(
    translator: LineTranslator, source: str, found: list[Translation], request: TranslateRequest
) -> LineTranslation:
    hypotheses = [
        Hypothesis(
            text=t.text,
            score=round(t.score, 4),
            attention=_attention(translator, source, t) if request.attention else None,
            token_scores=translator.token_score_record(t.tokens, t.token_scores)
            if request.token_scores
            else None,
        )
        for t in found
    ]
    return LineTranslation(
        text=found[0].text if found else "",
        truncated=bool(found) and found[0].truncated,
        unconstrained=bool(found) and found[0].unconstrained,
        hypotheses=hypotheses,
    )


def _attention(translator: LineTranslator, source: str, found: Translation) -> AttentionWeights:
    """A hypothesis' attention with the pieces that label its rows and columns."""
    return AttentionWeights(**translator.attention_record(source, found))
