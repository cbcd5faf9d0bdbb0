"""The ASGI middleware around the API: every request's answer is JSON, whatever happens.

`AnswerFailures` turns an exception nothing else answered into a JSON 500 for that request
alone (one line in the log, no traceback); `AllowedHosts` refuses a Host header the server
does not answer to (a web page reaching a local server by DNS rebinding sends its own);
`BodyLimit` refuses a body over the size limit, or one that does not arrive in time.
"""

from __future__ import annotations

import asyncio
import logging
import time

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from seq2seq.serve.request import short

log = logging.getLogger("uvicorn.error")
CLOSE = {"connection": "close"}  # for an answer before the whole body came: it may still come


class AnswerFailures:
    """A request whose handling raised gets `{"error": ...}` with status 500 (unless its
    answer had begun); the exception is logged in one line."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan: its failures are uvicorn's to report
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except ClientDisconnect:  # the client left: no one to answer
            return
        except Exception as error:  # noqa: BLE001 - the one place every failure ends
            what = f"{type(error).__name__}: {short(str(error), 200)}"
            log.error("%s %s failed: %s", scope.get("method"), scope.get("path"), what)
            if not started:
                message = f"the server failed on this request ({what}); report it if it recurs"
                await JSONResponse({"error": message}, status_code=500)(scope, receive, send)


def host_name(header: str) -> str:
    """A Host header's name, without its port: `[::1]:8000` -> `[::1]`."""
    name = header.strip().lower()
    if name.startswith("["):
        return name.split("]")[0] + "]"
    return name.rsplit(":", 1)[0] if name.count(":") == 1 else name


class AllowedHosts:
    """Refuses (400) a request whose Host header names none of `hosts` (None: any)."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str] | None) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.hosts is not None:
            header = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if host_name(header) not in self.hosts:
                named = f"Host {short(header)!r}" if header else "no Host header"
                message = (
                    f"{named}: this server answers to {', '.join(sorted(self.hosts))} only; "
                    "to serve another name, start it with --allowed-host NAME"
                )
                await JSONResponse({"error": message}, status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuses a request body over `limit` bytes with 413 before reading it into memory:
    at once when its Content-Length says so, else when its chunks add up to more; and one
    that has not all arrived `read_timeout` seconds after its headers with 408.
    (Starlette's own limit answers in plain text; every error here is JSON.)"""

    def __init__(self, app: ASGIApp, limit: int, read_timeout: float) -> None:
        self.app = app
        self.limit = limit
        self.read_timeout = read_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"the request body is over {self.limit} bytes; send fewer or shorter lines"
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.limit:
            await JSONResponse({"error": message}, 413, CLOSE)(scope, receive, send)
            return
        received, complete = 0, False
        deadline = time.monotonic() + self.read_timeout

        async def limited() -> Message:
            nonlocal received, complete
            if complete:  # waiting for a disconnect, not for the body
                return await receive()
            try:
                chunk = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0))
            except asyncio.TimeoutError:
                raise HTTPException(  # FastAPI answers it in JSON
                    408,
                    f"the request body did not arrive within {self.read_timeout:g} s of its "
                    "headers; send it whole, at once",
                    CLOSE,
                ) from None
            received += len(chunk.get("body", b""))
            complete = not chunk.get("more_body", False)
            if received > self.limit:
                raise HTTPException(413, message, CLOSE)
            return chunk

        await self.app(scope, limited, send)
