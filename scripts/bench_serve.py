"""Throughput and latency of `seq2seq serve` under N concurrent clients.

    python scripts/bench_serve.py --run runs/multi30k-transformer \\
        --input data/multi30k/test_2016_flickr.de.gz [--clients 1 4 16] [--requests 400] \\
        [--beam 5] [--soak 10000]

Starts the server on a free port of 127.0.0.1 and, after a warm-up, has N clients each send
one sentence of the input per request (the next one not yet sent, round the file), each
waiting for its answer before sending the next. Prints a JSON line per N (sentences/s,
p50/p95/max latency in ms, the server's resident memory) and a markdown table. --soak M then
sends M more requests with the largest N and reports the server's resident memory after
every tenth of them, and its peak, to show whether memory grows with requests served.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import httpx2  # noqa: E402
from serve_helpers import start_server  # noqa: E402

from seq2seq.data.corpus import read_lines  # noqa: E402


def memory_mb(pid: int) -> dict[str, float]:
    """The resident memory of a process now and at its peak, in MiB (Linux)."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status)
    return {key: int(fields[name].split()[0]) / 1024 for key, name in
            (("rss_mb", "VmRSS"), ("peak_rss_mb", "VmHWM"))}  # fmt: skip


class Load:
    """N clients sending one sentence per request until `requests` answers came back."""

    def __init__(self, url: str, sentences: list[str], beam: int) -> None:
        self.url, self.beam = url + "translate", beam
        self.sentences = itertools.cycle(sentences)
        self.lock = threading.Lock()

    def batches(self) -> int:
        """How many batches the server has decoded so far."""
        return httpx2.get(self.url.removesuffix("translate") + "health").json()["batches"]

    def run(self, clients: int, requests: int) -> dict[str, float]:
        latencies: list[float] = []
        left = iter(range(requests))

        def client() -> None:
            with httpx2.Client(timeout=120) as http:
                while True:
                    with self.lock:
                        if next(left, None) is None:
                            return
                        sentence = next(self.sentences)
                    started = time.perf_counter()
                    answer = http.post(self.url, json={"text": [sentence], "beam": self.beam})
                    answer.raise_for_status()
                    latencies.append(time.perf_counter() - started)

        batches = self.batches()
        started = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            for done in [pool.submit(client) for _ in range(clients)]:
                done.result()
        elapsed = time.perf_counter() - started
        cuts = statistics.quantiles(latencies, n=100)
        return {
            "clients": clients, "requests": requests,
            "sentences_per_s": round(requests / elapsed, 2),
            "sentences_per_batch": round(requests / (self.batches() - batches), 2),
            "p50_ms": round(cuts[49] * 1000, 1), "p95_ms": round(cuts[94] * 1000, 1),
            "max_ms": round(max(latencies) * 1000, 1),
        }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--input", type=Path, required=True, help="sentences to send")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--requests", type=int, default=400, help="per number of clients")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--soak", type=int, default=0, help="requests of the memory test")
    args = parser.parse_args()
    sentences = [line for line in read_lines(args.input) if line.strip()]
    process, url = start_server(args.run, "--max-queue", str(4 * max(args.clients)))
    try:
        load = Load(url, sentences, args.beam)
        load.run(1, args.warmup)
        rows = []
        for clients in args.clients:
            rows.append(load.run(clients, args.requests) | memory_mb(process.pid))
            print(json.dumps(rows[-1]), flush=True)
        print("\n| clients | sentences/s | p50 ms | p95 ms |\n|---:|---:|---:|---:|")
        for row in rows:
            print(f"| {row['clients']} | {row['sentences_per_s']:.1f} | {row['p50_ms']:.0f} "
                  f"| {row['p95_ms']:.0f} |")  # fmt: skip
        soak(load, process.pid, max(args.clients), args.soak)
    finally:
        process.terminate()
        process.wait(60)


def soak(load: Load, pid: int, clients: int, requests: int) -> None:
    """Serve `requests` more and report the memory after every tenth of them."""
    if not requests:
        return
    step = max(requests // 10, 1)
    for served in range(step, requests + 1, step):
        load.run(clients, step)
        print(json.dumps({"soak_requests": served} | memory_mb(pid)), flush=True)


if __name__ == "__main__":
    main()
