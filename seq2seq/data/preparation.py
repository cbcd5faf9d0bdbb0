"""Preparing a training corpus: its text streamed in chunks, encoded on every core, written
as a prepared corpus (prepared.py) under a temporary name and renamed into place whole.

A tokenizer directory holds one prepared corpus per training prefix, in `corpora/`; every
run that uses the tokenizer (a resumed run, the runs of a sweep, each torchrun rank) reads
it. `preparation_lock` serialises the processes that prepare into one tokenizer directory:
the second waits, then finds the work done.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from seq2seq.data.corpus import PairChunk, corpus_path, read_pairs
from seq2seq.data.prepared import SIDES, CorpusWriter, PreparedCorpus, Stale, file_record
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.errors import UserError
from seq2seq.files import publish_directory, write_problem

CORPORA = "corpora"
# Derived data in a tokenizer directory, never copied with its models (an export, a
# fine-tuning run's tokenizer): the prepared corpora, and the id cache of older versions.
DERIVED = (CORPORA, "ids")
CHUNK_PAIRS = 50_000  # pairs read and encoded at a time
_LOG_EVERY = 60.0  # seconds between progress lines while preparing

T = TypeVar("T")


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def source_files(prefix: str, src: str, tgt: str) -> dict[str, Path]:
    """The two text files of a corpus prefix, by side, as absolute paths."""
    return {
        side: corpus_path(prefix, lang).absolute()
        for side, lang in zip(SIDES, (src, tgt), strict=True)
    }


def corpus_directory(tokenizer_dir: Path, prefix: str, src: str, tgt: str) -> Path:
    """Where the corpus of `prefix` is prepared: named by the prefix's last part, the
    languages and a hash of its absolute path (two corpora named `train` never meet)."""
    where = hashlib.sha256(str(Path(prefix).absolute()).encode()).hexdigest()[:12]
    return Path(tokenizer_dir) / CORPORA / f"{Path(prefix).name}.{src}-{tgt}.{where}"


@contextlib.contextmanager
def preparation_lock(tokenizer_dir: Path, log: logging.Logger | None = None) -> Iterator[None]:
    """Hold the lock of a tokenizer directory's preparation (a file beside it); wait, saying
    so, while another process holds it. The lock goes with its process, however it ends."""
    tokenizer_dir = Path(tokenizer_dir)
    path = tokenizer_dir.parent / f".{tokenizer_dir.name}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+b")
    except OSError as error:
        raise write_problem(path, error) from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if log:
                log.info("another process is preparing %s; waiting for it", tokenizer_dir)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare_corpus(
    tokenizer: Tokenizer,
    tokenizer_dir: Path,
    prefix: str,
    langs: tuple[str, str],
    log: logging.Logger | None = None,
) -> PreparedCorpus:
    """The prepared corpus of `prefix`: opened if it is there and still matches its text and
    the tokenizer, else prepared (again). Hold `preparation_lock` around it."""
    sources = source_files(prefix, *langs)
    target = corpus_directory(tokenizer_dir, prefix, *langs)
    if target.is_dir():
        try:
            return PreparedCorpus.open(target, tokenizer.fingerprint, sources)
        except Stale as why:
            if log:
                log.warning("the prepared corpus %s cannot be used (%s); preparing it again",
                            target, why)  # fmt: skip
    _remove_leftovers(target)
    if log:
        log.info("preparing %s and %s in %s", sources["src"], sources["tgt"], target)
    started = time.monotonic()
    publish_directory(target, lambda tmp: _write(tokenizer, sources, tmp, log), replace=True)
    corpus = PreparedCorpus.open(target, tokenizer.fingerprint, sources)
    if log:
        seconds = time.monotonic() - started
        log.info("prepared %d pairs in %.0f s (%.0f pairs/s)", corpus.pairs, seconds,
                 corpus.pairs / max(seconds, 1e-9))  # fmt: skip
    return corpus


def _remove_leftovers(target: Path) -> None:
    """Remove what a preparation of `target` that was killed left (its temporary
    directory); under the lock, no other process is writing one."""
    if target.parent.is_dir():
        for leftover in target.parent.glob(f".{target.name}.*"):
            shutil.rmtree(leftover, ignore_errors=True)


def _write(tokenizer: Tokenizer, sources: dict[str, Path], directory: Path, log) -> None:
    """Stream the corpus into a new prepared corpus in `directory`."""
    directory.mkdir()
    digests = {side: hashlib.sha256() for side in sources}
    before = {side: _stamp(path) for side, path in sources.items()}
    writer = CorpusWriter(directory, max(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size))
    try:
        empty = _encode(tokenizer, sources, digests, writer, log)
        if not writer.pairs:
            raise UserError(
                f"{sources['src']}: every training pair has an empty side; check the corpus"
            )
        for side, path in sources.items():
            if _stamp(path) != before[side]:
                raise UserError(f"{path} changed while it was prepared; run the command again")
    except BaseException:
        writer.abandon()
        raise
    records = {side: file_record(path, digests[side].hexdigest()) for side, path in sources.items()}
    writer.finish({"tokenizer": tokenizer.fingerprint, "sources": records, "empty": empty})


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def _encode(tokenizer: Tokenizer, sources: dict[str, Path], digests: dict, writer, log) -> int:
    """Read, encode and write every pair; the count of pairs dropped for an empty side."""
    empty, threads, last_log = 0, cores(), time.monotonic()
    chunks = read_pairs(sources["src"], sources["tgt"], CHUNK_PAIRS, tuple(digests.values()))
    for chunk in _read_ahead(chunks):
        src = tokenizer.encode_src(chunk.src, threads)
        writer.add(src, tokenizer.encode_tgt(chunk.tgt, threads))
        empty += chunk.empty
        if log and time.monotonic() - last_log > _LOG_EVERY:
            log.info("... %d pairs prepared", writer.pairs)
            last_log = time.monotonic()
    return empty


def _read_ahead(chunks: Iterator[PairChunk]) -> Iterator[PairChunk]:
    """The chunks, each read (in a thread) while the one before it is encoded: reading and
    decoding hold the interpreter, SentencePiece's encoding releases it."""
    with ThreadPoolExecutor(1) as reader:
        pending = reader.submit(next, chunks, None)
        while (chunk := pending.result()) is not None:
            pending = reader.submit(next, chunks, None)
            yield chunk
