"""The HTTP API (FastAPI): `POST /translate`, `GET /health`, `GET /info` and the page at `/`.

Every error is JSON `{"error": "one line naming the problem and the fix"}`: 413 for a
request over a limit, 422 for a malformed one (the field named), 503 when the queue is full
or the server is stopping, 504 when the answer took longer than the timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from contextlib import asynccontextmanager
from importlib.resources import files
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from seq2seq.decode.translate import LineTranslator, Translation
from seq2seq.serve.batcher import MicroBatcher, QueueFull, ShuttingDown
from seq2seq.serve.schema import (
    AttentionWeights,
    Hypothesis,
    LineTranslation,
    ServeLimits,
    TranslateRequest,
    TranslateResponse,
)


def create_app(
    translator: LineTranslator,
    info: dict[str, Any],
    limits: ServeLimits,
    decoder: Executor | None = None,
) -> FastAPI:
    """The server of one translator; `info` is what `GET /info` answers. `decoder`: the
    one-thread executor that loaded the translator, to decode in (see `MicroBatcher`)."""

    def search(lines: list[str], beam: int, nbest: int, attention: bool) -> list[list[Translation]]:
        return translator.hypotheses(lines, nbest=nbest, beam=beam, attention=attention)

    batcher = MicroBatcher(search, limits.batch_lines, limits.batch_wait, limits.max_queue, decoder)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="seq2seq", version=info["versions"]["seq2seq"], lifespan=lifespan)
    app.add_middleware(BodyLimit, limit=limits.max_body)
    _answer_errors_as_json(app)
    page = files("seq2seq.serve").joinpath("page.html").read_text(encoding="utf-8")

    @app.get("/", response_class=HTMLResponse)
    async def index() -> str:
        return page

    @app.get("/health")
    async def health() -> dict[str, Any]:
        status = "stopping" if batcher.closing else "ok"
        return {"status": status, "queued": batcher.queue.qsize(), "batches": batcher.batches}

    @app.get("/info")
    async def model_info() -> dict[str, Any]:
        return info

    @app.post("/translate", response_model=TranslateResponse)
    async def translate(request: TranslateRequest) -> TranslateResponse:
        beam = check_request(request, limits, translator.decode.beam)
        found = await _decode(batcher, request, beam, limits.timeout)
        lines = [
            _line(translator, source, hyps, request.attention)
            for source, hyps in zip(request.text, found, strict=True)
        ]
        return TranslateResponse(translations=lines, beam=beam)

    return app


def _answer_errors_as_json(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": describe_request_error(error)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def refused(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": error.detail}, status_code=error.status_code)


def check_request(request: TranslateRequest, limits: ServeLimits, default_beam: int) -> int:
    """The beam the request is decoded with; an `HTTPException` for one over a limit."""
    if len(request.text) > limits.max_lines:
        raise HTTPException(
            413, f"{len(request.text)} lines in one request; send at most {limits.max_lines}"
        )
    for number, line in enumerate(request.text):
        if len(line) > limits.max_chars:
            raise HTTPException(
                413,
                f"text.{number} has {len(line)} characters; send lines of at most "
                f"{limits.max_chars}",
            )
    beam = request.beam or default_beam
    if beam > limits.max_beam:
        raise HTTPException(
            422, f"beam: {beam} is wider than this server allows ({limits.max_beam})"
        )
    if request.nbest > beam:
        raise HTTPException(422, f"nbest: {request.nbest} needs a beam at least as wide ({beam})")
    return beam


async def _decode(
    batcher: MicroBatcher, request: TranslateRequest, beam: int, timeout: float
) -> list[list[Translation]]:
    try:
        translated = batcher.translate(request.text, beam, request.nbest, request.attention)
        return await asyncio.wait_for(translated, timeout)
    except QueueFull:
        raise HTTPException(503, "the server is busy (its queue is full); retry later") from None
    except ShuttingDown:
        raise HTTPException(503, "the server is stopping; send the request elsewhere") from None
    except asyncio.TimeoutError:
        raise HTTPException(
            504, f"no answer within {timeout:g} s; send fewer or shorter lines, or retry later"
        ) from None


def _line(
    translator: LineTranslator, source: str, found: list[Translation], attention: bool
) -> LineTranslation:
    hypotheses = [
        Hypothesis(
            text=t.text,
            score=round(t.score, 4),
            attention=_attention(translator, source, t) if attention else None,
        )
        for t in found
    ]
    return LineTranslation(
        text=found[0].text if found else "",
        truncated=bool(found) and found[0].truncated,
        hypotheses=hypotheses,
    )


def _attention(translator: LineTranslator, source: str, found: Translation) -> AttentionWeights:
    """A hypothesis' attention with the pieces that label its rows and columns."""
    weights = found.attention.double()
    src_pieces, tgt_pieces = translator.attention_labels(source, found)
    return AttentionWeights(
        source=src_pieces,
        target=tgt_pieces,
        heads=weights.size(1) if weights.dim() == 3 else None,
        weights=weights.mul(1e4).round().div(1e4).tolist(),
    )


def describe_request_error(error: RequestValidationError) -> str:
    """A malformed request's problems as one line, each naming its field."""
    problems = []
    for item in error.errors():
        loc = [str(part) for part in item["loc"] if part != "body"]
        field = ".".join(loc) or "body"
        if item["type"] == "extra_forbidden":
            allowed = ", ".join(TranslateRequest.model_fields)
            problems.append(f"unknown field {field!r}; allowed: {allowed}")
        elif item["type"] == "json_invalid":
            problems.append(f"the body is not valid JSON ({item.get('ctx', {}).get('error')})")
        else:
            problems.append(f"{field}: {item['msg']}")
    return "; ".join(problems)


class BodyLimit:
    """Refuses a request body over `limit` bytes with 413 before reading it into memory:
    at once when its Content-Length says so, else when its chunks add up to more.
    (Starlette's own limit answers in plain text; every error here is JSON.)"""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"the request body is over {self.limit} bytes; send fewer or shorter lines"
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.limit:
            await JSONResponse({"error": message}, status_code=413)(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            chunk = await receive()
            received += len(chunk.get("body", b""))
            if received > self.limit:
                raise HTTPException(413, message)  # FastAPI passes it to `refused`
            return chunk

        await self.app(scope, limited, send)
