"""uvicorn's HTTP/1.1 protocol (h11) with changes below the app, where its middleware
cannot reach: a request that is not valid HTTP is answered in JSON like every other error
(uvicorn answers plain text), and so is one that frames its body two ways (Content-Length
and Transfer-Encoding both: a proxy that read the other could be smuggled a request); the
connection is closed once the client has had the answer; and a connection whose request
headers have not all come within `read_timeout` seconds (of the connection, or of its
previous answer) is closed (uvicorn holds it open for ever).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from seq2seq.serve.request import short

# h11 quotes what it refused as Python bytes (`bytearray(b'zz\r\n')`): the quoted text is kept.
_BYTES = r"""b('(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")"""
BYTES_REPR = re.compile(rf"bytearray\({_BYTES}\)|\b{_BYTES}")
FRAMINGS = {b"content-length", b"transfer-encoding"}


class GuardedH11Protocol(H11Protocol):
    def __init__(self, *args: Any, read_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_timeout = read_timeout
        self.header_timer: asyncio.TimerHandle | None = None
        self.problem = ""  # why h11 refused the request, for the 400 answer
        self.refused = False  # answered 400: what still comes is read and dropped
        self.conn.next_event = self.next_event  # to see h11's reason

    def next_event(self) -> Any:
        try:
            event = h11.Connection.next_event(self.conn)
            if isinstance(event, h11.Request) and FRAMINGS <= {name for name, _ in event.headers}:
                raise h11.RemoteProtocolError("both Content-Length and Transfer-Encoding")
            return event
        except h11.RemoteProtocolError as error:
            plain = BYTES_REPR.sub(lambda quoted: quoted[1] or quoted[2], str(error))
            self.problem = short(plain, 200)
            raise

    def data_received(self, data: bytes) -> None:
        if not self.refused:
            super().data_received(data)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.await_headers()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self.await_headers()  # of the next request on this connection

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE and self.header_timer is not None:
            self.header_timer.cancel()  # a request's headers came (or it failed)
            self.header_timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
        super().connection_lost(exc)

    def await_headers(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
        self.header_timer = self.loop.call_later(self.read_timeout, self.headers_too_late)

    def headers_too_late(self) -> None:
        self.header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        reason = self.problem or msg
        error = f"the request is not valid HTTP/1.1 ({reason}); send a well-formed request"
        body = json.dumps({"error": error}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # else the app has answered
            for event in (
                h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                h11.Data(data=body),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event))
        # Closed once the client has read the answer (or after `read_timeout`): closed with
        # its request still arriving, the connection would be reset and the answer lost.
        self.refused = True
        if self.cycle is not None:  # the app, reading the body, is told the client left
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.write_eof()
        self.loop.call_later(self.read_timeout, self.transport.close)
