"""Loading a run and serving it with uvicorn until SIGTERM or SIGINT.

uvicorn stops gracefully on either signal: it closes the listening socket (new connections
are refused), lets requests in flight finish (up to the request timeout), then runs the
app's shutdown, which drains the batch queue.
"""

from __future__ import annotations

import ipaddress
import platform
import socket
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch

from seq2seq.config import DataConfig
from seq2seq.decode.translate import Translator
from seq2seq.device import use_threads
from seq2seq.errors import UserError
from seq2seq.serve.schema import ServeLimits
from seq2seq.version import VERSION


def require_server() -> None:
    """Refuse in one line where the `serve` extra is not installed."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise UserError(
            "seq2seq serve needs FastAPI and uvicorn: pip install -e '.[serve]' (make install does)"
        ) from None


def model_info(translator: Translator, limits: ServeLimits) -> dict[str, Any]:
    """What `GET /info` says: the model, its languages and checkpoint, the decoding
    defaults, the limits and the versions of what computes it."""
    origin = translator.origin
    cfg = origin.config
    model = cfg.model
    attention = {
        name: {
            "type": section.type,
            "heads": model.heads(section),
            "normalizer": section.normalizer,
        }
        for name, section in model.attention_sections().items()
    }
    architecture = {
        "arch": model.arch,
        **attention,
        "embed_dim": model.embed_dim,
        "hidden_dim": model.hidden_dim,
        "encoder_layers": model.encoder_layers,
        "decoder_layers": model.decoder_layers,
        "parameters": sum(p.numel() for p in translator.model.parameters()),
    }
    return {
        "run": cfg.name,
        "languages": _languages(cfg.data),
        "model": architecture,
        "checkpoint": {"name": origin.checkpoint_name, "step": origin.step},
        "decode": translator.decode.model_dump(),
        "tags": list(translator.tags.tags),
        "max_source_pieces": translator.max_source,
        "limits": asdict(limits) | {"max_body": limits.max_body},
        "device": str(translator.device),
        # a count the user fixed, or "free": as many as other work leaves free, batch by batch
        "threads": "free" if translator.cpu_threads is not None else torch.get_num_threads(),
        "versions": {"seq2seq": VERSION}
        | {name: version(name) for name in ("torch", "fastapi", "uvicorn")}
        | {"python": platform.python_version()},
    }


@dataclass(frozen=True)
class Served:
    """The model a server translates with, as `Translator.load` takes it: `threads` CPU
    threads (None: those other work leaves free), `decode` the decode fields that replace
    the run's as the requests' defaults."""

    run: Path
    checkpoint: str = "best"
    device: str | None = None
    threads: int | None = None
    decode: dict[str, Any] = field(default_factory=dict)

    def load(self) -> Translator:
        return Translator.load(self.run, self.checkpoint, self.device, self.threads, **self.decode)


def _languages(data: DataConfig) -> dict[str, Any]:
    """The languages a model translates: data.src and data.tgt (null where each corpus
    names its own), its pairs, and the target languages a request's tgt_lang may choose."""
    pairs = dict.fromkeys(data.pair(corpus) for corpus in data.train_corpora)
    return {
        "source": data.src,
        "target": data.tgt,
        "pairs": [list(pair) for pair in pairs],
        "tgt_lang": list(data.source_tags.targets),
    }


def serve(
    served: Served, host: str, port: int, limits: ServeLimits, allowed: Sequence[str] = ()
) -> None:
    """Serve a model at http://HOST:PORT/ until SIGTERM or SIGINT, to requests whose Host
    header names HOST, its address or one of `allowed` (see `allowed_hosts`)."""
    if served.threads is not None:  # checked before listening; the count /info reports
        use_threads(served.threads)
    require_server()
    import uvicorn

    from seq2seq.serve.app import create_app
    from seq2seq.serve.protocol import GuardedH11Protocol

    listener = listen(host, port)  # before loading: a port in use is found at once
    address = listener.getsockname()
    hosts = allowed_hosts(host, address[0], allowed)
    decoder = ThreadPoolExecutor(1, thread_name_prefix="decode")  # loads and decodes
    translator = decoder.submit(served.load).result()
    app = create_app(translator, model_info(translator, limits), limits, decoder, hosts)
    config = uvicorn.Config(
        app,
        http=partial(GuardedH11Protocol, read_timeout=limits.read_timeout),
        ws="none",  # no WebSocket upgrades: the API has none
        timeout_graceful_shutdown=int(limits.timeout) + 5,
    )
    where = f"[{address[0]}]" if listener.family == socket.AF_INET6 else address[0]
    print(f"serving {served.run} at http://{where}:{address[1]}/ (Ctrl-C stops)", file=sys.stderr)
    uvicorn.Server(config).run(sockets=[listener])


def allowed_hosts(host: str, address: str, allowed: Sequence[str]) -> frozenset[str] | None:
    """The names a request's Host header may give: HOST and the address it bound (and
    `localhost` for a loopback one) and `allowed`. None (any name) for `*`, or for a
    wildcard address (0.0.0.0, ::) and nothing `allowed`: the names of a server open to the
    network cannot be known. A local server that answers any name can be reached by a web
    page through DNS rebinding: its own name made to point at 127.0.0.1."""
    from seq2seq.serve.guards import host_name

    if "*" in allowed:
        return None
    ip = ipaddress.ip_address(address.split("%")[0])
    if ip.is_unspecified and not allowed:
        return None
    names = {host, address, *allowed}
    if ip.is_loopback or ip.is_unspecified:
        names |= {"localhost", "::1" if ip.version == 6 else "127.0.0.1"}
    # As a Host header gives them: an IPv6 address in brackets, no port, lower case.
    bare = [name.strip().strip("[]") for name in names]
    return frozenset(f"[{b.lower()}]" if b.count(":") > 1 else host_name(b) for b in bare)


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to HOST:PORT (port 0: a free one), or one line saying why not."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        listener = socket.socket(family, socket.SOCK_STREAM)
    except OSError as error:
        raise UserError(
            f"--host {host}: {error.strerror or error}; pass an address of this machine"
        ) from None
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as error:
        listener.close()
        raise UserError(
            f"cannot listen on {host}:{port} ({error.strerror}); pass another --port or --host"
        ) from None
    listener.listen()  # a client of the printed address waits for uvicorn, not refused
    return listener
