"""`seq2seq serve` as a real process on 127.0.0.1, one for the whole module: concurrent
clients share batches, and hostile ones (an unreadable line, a huge body, a stalled
connection, a foreign Host header, broken HTTP) get JSON errors without costing anyone
else. Every loop here is bounded in count and time."""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from serve_helpers import start_server

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("httpx2", reason="the serve extra is not installed: pip install -e '.[serve]'")
import httpx2  # noqa: E402

from seq2seq.decode.translate import Translator  # noqa: E402
from seq2seq.serve.server import allowed_hosts  # noqa: E402

READ_TIMEOUT = 1.0
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def translator(trained) -> Translator:
    return Translator.load(trained)


@pytest.fixture(scope="module")
def server(trained):
    process, url = start_server(
        trained, "--batch-wait-ms", "300", "--read-timeout", str(READ_TIMEOUT), "--threads", "1"
    )
    yield url
    process.terminate()
    process.wait(30)


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].strip("/"))


def test_eight_concurrent_clients_are_answered_correctly_in_shared_batches(server, translator):
    sentences = [f"{a} {b}" for a in ("boka", "mimi", "toto", "tape") for b in ("podo", "toto")]
    barrier = threading.Barrier(8)

    def ask(sentence: str) -> str:
        barrier.wait()
        answer = httpx2.post(server + "translate", json={"text": [sentence]}, timeout=60)
        assert answer.status_code == 200
        return answer.json()["translations"][0]["text"]

    before = httpx2.get(server + "health").json()["batches"]
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, sentences))
    assert time.monotonic() - started < 30
    assert answers == [translator.translate([s])[0] for s in sentences]
    assert httpx2.get(server + "health").json()["batches"] - before < 8  # some were shared
    assert httpx2.get(server + "info").json()["threads"] == 1  # as --threads says


def test_a_line_the_tokenizer_cannot_read_fails_its_own_request_and_no_other(server, translator):
    """A lone surrogate is valid JSON and a str, but not text: SentencePiece refuses it.
    Sent among good requests that arrive together (so that they would share a batch)."""
    good = ["boka podo", "mimi toto", "toto tape", "tape boka", "podo mimi", "boka toto"]
    bad = [b'{"text": ["\\ud800"]}', b'{"text": ["toto", "a\\udfffb"]}']
    barrier = threading.Barrier(len(good) + len(bad))

    def ask(body: bytes) -> httpx2.Response:
        barrier.wait()
        return httpx2.post(server + "translate", content=body, headers=JSON, timeout=60)

    with ThreadPoolExecutor(len(good) + len(bad)) as pool:
        bodies = [json.dumps({"text": [line]}).encode() for line in good] + bad
        answers = list(pool.map(ask, bodies))
    texts = [answer.json()["translations"][0]["text"] for answer in answers[: len(good)]]
    assert [a.status_code for a in answers] == [200] * len(good) + [422, 422]
    assert texts == [translator.translate([line])[0] for line in good]
    assert answers[-2].json()["error"] == (
        "text.0: character 0 is a lone surrogate (U+D800), which is not text; send valid Unicode"
    )
    assert answers[-1].json()["error"].startswith("text.1: character 1 is a lone surrogate")


def test_a_huge_body_gets_a_short_error_and_health_answers_meanwhile(server):
    """700,000 numbers (1.4 MB, under the body limit) in place of lines."""
    body = ('{"text": [' + ",".join("1" for _ in range(700_000)) + "]}").encode()
    with ThreadPoolExecutor(1) as pool:
        huge = pool.submit(httpx2.post, server + "translate", content=body, headers=JSON,
                           timeout=60)  # fmt: skip
        waits = []
        while not huge.done() and len(waits) < 200:
            started = time.monotonic()
            assert httpx2.get(server + "health", timeout=30).status_code == 200
            waits.append(time.monotonic() - started)
        answer = huge.result()
    assert answer.status_code == 413
    assert answer.json() == {"error": "700000 lines in one request; send at most 64"}
    assert max(waits) < 2.0, waits  # main: 7 s and more


def exchange(url: str, data: bytes, wait: float = 5 * READ_TIMEOUT) -> tuple[bytes, float | None]:
    """Raw bytes to the server on a new connection; what came back before the server closed
    it, and how long after sending that was (None: still open after `wait` seconds)."""
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=wait) as connection:
        connection.sendall(data)
        started, received = time.monotonic(), b""
        try:
            while chunk := connection.recv(65536):
                received += chunk
        except TimeoutError:
            return received, None
        return received, time.monotonic() - started


def answer_of(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), head
    return int(head.split()[1]), json.loads(body)


@pytest.mark.parametrize(
    "sent",
    [b"", b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le"],
    ids=["nothing", "half the headers"],
)
def test_a_connection_whose_headers_do_not_come_is_closed(server, sent):
    received, closed_after = exchange(server, sent)
    assert closed_after is not None, "the server still holds the connection"
    assert closed_after < 3 * READ_TIMEOUT and received == b""


def test_a_body_that_does_not_come_is_408_and_the_connection_closed(server):
    head = b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    received, closed_after = exchange(server, head + b'Content-Length: 100\r\n\r\n{"text": [')
    assert closed_after is not None, "the server still holds the connection"
    status, body = answer_of(received)
    assert status == 408 and "did not arrive within 1 s of its headers" in body["error"]


POST = b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
CHUNKED = b"Transfer-Encoding: chunked\r\n"


@pytest.mark.parametrize(
    "request_, fragment",
    [
        (b"GET /health HTTP/1.1\r\n\r\n", "Missing mandatory Host: header"),
        (POST + b"Content-Length: x\r\n\r\n", "bad Content-Length"),
        (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n",
         "illegal header line: 'Bad Header'"),
        (POST + CHUNKED + b"\r\nzz\r\n", r"illegal chunk header: 'zz\r\n'"),
        (POST + b"Content-Length: 13\r\n" + CHUNKED + b'\r\nd\r\n{"text": []}\r\n0\r\n\r\n',
         "both Content-Length and Transfer-Encoding"),
        (POST + b"X-Long: " + b"x" * 200_000 + b"\r\n\r\n", "Receive buffer too long"),
        (b"GET /" + b"x" * 200_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
         "Receive buffer too long"),
    ],
    ids=["no Host", "bad Content-Length", "bad header line", "bad chunk size",
         "two framings", "200 kB header", "200 kB URL"],
)  # fmt: skip
def test_a_request_that_is_not_http_gets_a_json_400(server, request_, fragment):
    received, closed_after = exchange(server, request_)
    status, body = answer_of(received)  # whole: a Content-Length, not chunks
    assert status == 400 and closed_after is not None
    assert received.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert body["error"].startswith("the request is not valid HTTP/1.1 (")
    assert fragment in body["error"] and "bytearray" not in body["error"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST"])
def test_the_names_of_the_bound_address_are_served(server, host):
    port = port_of(server)
    answer = httpx2.get(server + "health", headers={"host": f"{host}:{port}"})
    assert answer.status_code == 200


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:80", "127.0.0.2"])
def test_a_foreign_host_header_is_refused_so_dns_rebinding_cannot_reach_the_server(server, host):
    answer = httpx2.post(server + "translate", json={"text": ["toto"]}, headers={"host": host})
    assert answer.status_code == 400
    assert answer.json()["error"] == (
        f"Host {host!r}: this server answers to 127.0.0.1, localhost only; to serve another "
        "name, start it with --allowed-host NAME"
    )


def test_an_http_1_0_request_without_host_is_refused_in_json(server):
    received, _ = exchange(server, b"GET /health HTTP/1.0\r\n\r\n")
    status, body = answer_of(received)
    assert status == 400 and body["error"].startswith("no Host header: this server answers to")


@pytest.mark.parametrize(
    "host, address, allowed, names",
    [
        ("127.0.0.1", "127.0.0.1", (), {"127.0.0.1", "localhost"}),
        ("localhost", "::1", (), {"localhost", "[::1]"}),
        ("::1", "::1", ("[::1]", "Translate.Example:8080"),
         {"[::1]", "localhost", "translate.example"}),
        ("10.1.2.3", "10.1.2.3", (), {"10.1.2.3"}),
        ("0.0.0.0", "0.0.0.0", (), None),
        ("0.0.0.0", "0.0.0.0", ("box.lan",), {"box.lan", "0.0.0.0", "127.0.0.1", "localhost"}),
        ("127.0.0.1", "127.0.0.1", ("*",), None),
    ],
)  # fmt: skip
def test_the_allowed_hosts_are_the_bound_address_its_names_and_those_given(
    host, address, allowed, names
):
    assert allowed_hosts(host, address, allowed) == (names and frozenset(names))
