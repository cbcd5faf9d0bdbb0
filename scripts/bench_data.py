"""`scripts/bench.py data`: what a training corpus of real size costs, from the text to the
first update.

It makes a synthetic corpus of --pairs pairs from Multi30k (each side of a pair: two
training sentences joined with a space, drawn with a fixed seed; cached in --work), then
runs the seq2seq of this checkout (or the one --code names) as a user would:

- `prepare`: `seq2seq prepare` (cleaning where `--set data.filters=...` asks, tokenizer
  training on a sample, encoding on every core), its wall time and pairs/s, its peak
  resident set, and the bytes on disk per token of what it wrote; `--prepare-only` stops
  there;
- `first_update`: `seq2seq train` on the prepared corpus, one process and then --ranks
  torchrun processes, each watched until the log says its first update is done: the
  seconds from the command to that line; then until update --updates (the log's lines:
  1, then every train.log_every), each process's peak resident set (VmHWM) and its peak
  proportional set size (PSS, /proc/PID/smaps_rollup, sampled: RSS counts a shared file
  page in every process that maps it, PSS splits it among them). The peak of one update
  is mostly its batch's activations, which vary with the batch drawn; the peak over 20
  updates varies less. The command is then killed.

With --code naming a checkout from before prepared corpora (no `prepare` command), the
first `train` trains the tokenizer and tokenizes the corpus, and a second one reads the
cached ids: both are timed, as `first_update` with `tokenizer` trained or cached.

Each measurement prints one JSON line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UPDATE = re.compile(r"\bstep (\d+)  epoch")  # a log line of the updates
SOURCE = "data/multi30k/train"
SAMPLE_EVERY = 0.2  # seconds between PSS samples


def make_corpus(work: Path, pairs: int, src: str, tgt: str, source: str = SOURCE) -> str:
    """The prefix of a corpus of `pairs` pairs, each side two sentences of the corpus
    `source` (Multi30k's training set) joined (made once; `.done` marks it complete)."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from seq2seq.data.corpus import corpus_path, read_lines

    directory = work / f"corpus-{pairs}"
    prefix = directory / "train"
    if (directory / ".done").is_file():
        return str(prefix)
    directory.mkdir(parents=True, exist_ok=True)
    sides = {lang: read_lines(corpus_path(str(ROOT / source), lang)) for lang in (src, tgt)}
    rng = np.random.default_rng(20240601)
    first, second = (rng.integers(0, len(sides[src]), pairs) for _ in range(2))
    for lang, lines in sides.items():
        with open(f"{prefix}.{lang}.tmp", "w", encoding="utf-8") as handle:
            for start in range(0, pairs, 100_000):
                block = zip(
                    first[start : start + 100_000], second[start : start + 100_000], strict=True
                )
                handle.write("".join(f"{lines[a]} {lines[b]}\n" for a, b in block))
        os.replace(f"{prefix}.{lang}.tmp", f"{prefix}.{lang}")
    (directory / ".done").write_text(f"{pairs}\n")
    return str(prefix)


def memory(pid: int) -> dict[str, int]:
    """kB of the process's resident set, its peak, and its proportional set size."""
    found = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            found.update(_fields(rollup, ("Rss:", "Pss:")))
        with open(f"/proc/{pid}/status") as status:
            found.update(_fields(status, ("VmHWM:",)))
    except OSError:  # it ended meanwhile
        pass
    return found


def _fields(lines, names: tuple[str, ...]) -> dict[str, int]:
    return {line.split()[0]: int(line.split()[1]) for line in lines if line.startswith(names)}


def workers(launcher: int) -> list[int]:
    """The training processes under `launcher`: itself, or torchrun's ranks (they have RANK
    in their environment), in rank order. A rank's own children inherit RANK and are not
    ranks: the search stops at a rank."""
    found, pending = [], [launcher]
    while pending:
        pid = pending.pop()
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        rank = next((e[5:] for e in environ if e.startswith(b"RANK=")), None)
        if rank is not None:
            found.append((int(rank), pid))
        else:
            pending += map(int, children)
    return [pid for _, pid in sorted(found)] or [launcher]


class Watch:
    """The peak memory of a command's training processes, sampled until it is stopped."""

    def __init__(self, launcher: int) -> None:
        self.launcher, self.peaks, self.running = launcher, {}, True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while self.running:
            for pid in workers(self.launcher):
                now = memory(pid)
                peak = self.peaks.setdefault(pid, {})
                for key, value in now.items():
                    peak[key] = max(peak.get(key, 0), value)
            time.sleep(SAMPLE_EVERY)

    def stop(self) -> list[dict[str, int]]:
        for pid in workers(self.launcher):  # the last word: VmHWM is exact
            self.peaks.setdefault(pid, {}).update(memory(pid))
        self.running = False
        self.thread.join()
        return [self.peaks[pid] for pid in sorted(self.peaks) if pid != self.launcher] or [
            self.peaks.get(self.launcher, {})
        ]


def until_update(
    command: list[str], env: dict, updates: int, cwd: Path
) -> tuple[float, list[dict[str, int]]]:
    """Run `command` until its log says update `updates` is done; its seconds to the first
    update's line and each training process's peak memory until then. The command is then
    killed."""
    started, first = time.perf_counter(), None
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    watch = Watch(process.pid)
    tail: list[str] = []
    try:
        for line in process.stderr:
            tail = [*tail[-20:], line]
            found = UPDATE.search(line)
            if found and first is None:
                first = time.perf_counter() - started
            if found and int(found.group(1)) >= updates:
                return first, watch.stop()
        raise SystemExit(f"{' '.join(command)} ended before its first update:\n{''.join(tail)}")
    finally:
        watch.running = False
        for pid in workers(process.pid):  # torchrun's ranks run in sessions of their own
            os.kill(pid, signal.SIGKILL)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def seq2seq(code: Path, *args: str, ranks: int = 1) -> tuple[list[str], dict]:
    """The command line of `seq2seq ARGS` with the code of `code` (under torchrun when
    `ranks` > 1), and its environment. Run it in `code`: `python -m` imports from the
    working directory first (relative paths of the config then start there too)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    return [sys.executable, *(launcher if ranks > 1 else []), "-m", "seq2seq", *args], env


def first_update_line(args, run: Path, overrides: list[str], ranks: int, **fields: object) -> dict:
    command, env = seq2seq(args.code, "train", str(args.config), "--run-dir", str(run), ranks=ranks)
    command += [x for o in overrides for x in ("--set", o)]
    seconds, peaks = until_update(command, env, args.updates, args.code)
    rss = [round(p.get("VmHWM:", 0) / 1024, 1) for p in peaks]
    pss = [round(p.get("Pss:", 0) / 1024, 1) for p in peaks]
    return {
        "mode": "data", "measure": "first_update", "pairs": args.pairs, "processes": ranks,
        **fields, "seconds": round(seconds, 1), "memory_over_updates": args.updates,
        "peak_rss_mb": rss, "peak_pss_mb": pss, "total_peak_pss_mb": round(sum(pss), 1),
    }  # fmt: skip


# What `seq2seq train` does with the data before the model's first update, in a process of
# its own: the memory it takes beyond the imports, and its seconds.
DATA_PROBE = """
import json, logging, sys, time
from pathlib import Path
from seq2seq.checkpoint import RunDir
from seq2seq.config import load_config
from seq2seq.train.datasets import load_datasets
def kib(field):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(field))
cfg = load_config(Path(sys.argv[1]), sys.argv[3:])
before, started = kib("VmRSS:"), time.perf_counter()
data = load_datasets(cfg, RunDir(Path(sys.argv[2])), logging.getLogger("probe"))
loaded = time.perf_counter() - started
data.train.batch(data.train.epoch(0)[0])
seconds = round(time.perf_counter() - started - loaded, 2)
peak, now = (round((kib(field) - before) / 1024, 1) for field in ("VmHWM:", "VmRSS:"))
print(json.dumps({"data_seconds": round(loaded, 2), "epoch_seconds": seconds,
                  "data_peak_mb": peak, "data_rss_mb": now}))
"""


def data_line(args, run: Path, overrides: list[str]) -> dict:
    """The training data's own memory and seconds in a process: the corpus prepared there,
    filtered, the first epoch's batches drawn and one built."""
    env = {**os.environ, "PYTHONPATH": str(args.code)}
    command = [sys.executable, "-c", DATA_PROBE, str(args.config), str(run), *overrides]
    done = subprocess.run(command, cwd=args.code, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the data probe failed:\n{done.stderr[-3000:]}")
    return {"mode": "data", "measure": "data", "pairs": args.pairs, **json.loads(done.stdout)}


def prepare_line(args, run: Path, overrides: list[str]) -> dict:
    command, env = seq2seq(args.code, "prepare", str(args.config), "--run-dir", str(run))
    command += [x for o in overrides for x in ("--set", o)]
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=args.code, env=env, stderr=subprocess.PIPE, text=True)
    err = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    if status:
        raise SystemExit(f"seq2seq prepare failed:\n{err[-3000:]}")
    return {
        "mode": "data", "measure": "prepare", "pairs": args.pairs, "set": args.set,
        "seconds": round(seconds, 1), "pairs_per_s": round(args.pairs / seconds),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), **disk_use(run / "tokenizer/corpora"),
    }  # fmt: skip


def disk_use(corpora: Path) -> dict:
    """Bytes on disk of the prepared corpora, per token and per pair."""
    size = tokens = pairs = 0
    for manifest in corpora.glob("*/manifest.json"):
        record = json.loads(manifest.read_text())
        size += sum(f.stat().st_size for f in manifest.parent.iterdir())
        tokens += sum(record["tokens"].values())
        pairs += record["pairs"]
    return {
        "disk_bytes": size,
        "tokens": tokens,
        "bytes_per_token": round(size / tokens, 3),
        "index_bytes_per_pair": round((size - 2 * tokens) / pairs, 1),
    }


def show(line: dict) -> None:
    """Print a measurement's line, with the load of the machine when it ended (other
    programs computing meanwhile make its times meaningless)."""
    print(json.dumps({**line, "load_1m": round(os.getloadavg()[0], 2)}), flush=True)


def measure_data(args) -> None:
    """Every measurement of `bench.py data`, a JSON line each."""
    import yaml

    config = yaml.safe_load(args.config.read_text())
    src, tgt = config["data"]["src"], config["data"]["tgt"]
    prefix = make_corpus(args.work, args.pairs, src, tgt, args.source)
    overrides = [f"data.train={prefix}", "train.valid_every=1000000", *args.set]
    run = args.work / f"run-{args.pairs}-{args.code.name}"
    if not args.prepared:
        shutil.rmtree(run, ignore_errors=True)
    data = args.code / "seq2seq/data"
    if (data / "prepared_corpus.py").is_file() or (data / "prepared.py").is_file():  # (older)
        if not args.prepared:
            show(prepare_line(args, run, overrides))
        if args.prepare_only:
            return
        show(data_line(args, run, overrides))
        for ranks in sorted({1, args.ranks}):
            show(first_update_line(args, run, overrides, ranks))
        return
    for tokenizer in ("trained", "cached"):  # a checkout with the id cache
        line = first_update_line(args, run, overrides, 1, tokenizer=tokenizer)
        show(line)
    if args.ranks > 1:
        line = first_update_line(args, run, overrides, args.ranks, tokenizer="cached")
        show(line)
