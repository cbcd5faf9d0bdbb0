"""Preparing a training corpus: its text streamed in chunks, encoded on every core, written
as a prepared corpus (prepared_corpus.py) under a temporary name and renamed into place whole.

A tokenizer directory holds one prepared corpus per training corpus, in `corpora/`; every
run that uses the tokenizer (a resumed run, the runs of a sweep, each torchrun rank) reads
it. `preparation_lock` serialises the processes that prepare into one tokenizer directory:
the second waits, then finds the work done.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import numpy as np

from seq2seq.data.alignments import PieceLinks, word_starts
from seq2seq.data.corpus import PairChunk
from seq2seq.data.prepared_corpus import (
    ALIGN,
    CorpusWriter,
    PreparedCorpus,
    Stale,
    file_record,
)
from seq2seq.data.source import CorpusInput, CorpusSource, Langs
from seq2seq.data.sources import corpus_source, spec_from_record, spec_record
from seq2seq.data.tokenizer import CORPORA, SegmentationSample, Tokenizer
from seq2seq.errors import ResourceError, UserError
from seq2seq.files import publish_directory, write_problem
from seq2seq.processes import same_code_environment

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


def corpus_directory(
    tokenizer_dir: Path,
    source: CorpusSource,
    langs: Langs,
    sample: SegmentationSample | None = None,
    aligned: bool = False,
) -> Path:
    """Where the corpus of `source` is prepared: named by its name, the languages and a
    hash of its identity (its absolute path: two corpora named `train` never meet); a
    sampled segmentation of it by its settings' hash and its number too; one with its
    alignments apart from one without."""
    where = hashlib.sha256(source.identity.encode()).hexdigest()[:12]
    name = f"{source.name}.{'-'.join(langs)}.{where}" + (".aligned" if aligned else "")
    if sample is not None:
        drawn = hashlib.sha256(f"{sample.alpha} {sample.nbest}".encode())
        name += f".sample-{drawn.hexdigest()[:8]}-{sample.number}"
    return Path(tokenizer_dir) / CORPORA / name


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
    source: CorpusSource,
    langs: Langs,
    log: logging.Logger | None = None,
    sample: SegmentationSample | None = None,
    aligned: bool = False,
) -> PreparedCorpus:
    """The prepared corpus of `source` (in the tokenizer's best segmentation, or in
    `sample`; `aligned`: with the piece links of its alignments): opened if it is there and
    still matches its text, the tokenizer and the sample, else prepared (again). Hold
    `preparation_lock` around it."""
    files = source.files(langs, aligned)
    target = corpus_directory(tokenizer_dir, source, langs, sample, aligned)
    if target.is_dir():
        try:
            return PreparedCorpus.open(target, tokenizer.fingerprint, files, sample)
        except Stale as why:
            if log:
                log.warning(
                    "the prepared corpus %s cannot be used (%s); preparing it again", target, why
                )
    _remove_leftovers(target)
    if log:
        log.info("preparing %s in %s", source, target)
    started = time.monotonic()
    read = functools.partial(source.chunks, langs, CHUNK_PAIRS, aligned=aligned)
    write = functools.partial(_write, tokenizer, source, files, read, log=log, sample=sample)
    publish_directory(target, write, replace=True)
    corpus = PreparedCorpus.open(target, tokenizer.fingerprint, files, sample)
    if log:
        seconds = time.monotonic() - started
        log.info(
            "prepared %d pairs in %.0f s (%.0f pairs/s)",
            corpus.pairs,
            seconds,
            corpus.pairs / max(seconds, 1e-9),
        )
    return corpus


def prepare_samples(
    tokenizer: Tokenizer,
    tokenizer_dir: Path,
    corpora: list[CorpusInput],
    samples: list[SegmentationSample],
    log: logging.Logger | None = None,
) -> list[list[PreparedCorpus]]:
    """The prepared corpus of each training corpus in each sampled segmentation. Those not
    there are drawn in child processes, one a core: SentencePiece's sampling runs on one
    thread, from a seed global to its process. Hold `preparation_lock` around it."""
    missing = [
        (corpus, sample)
        for sample in samples
        for corpus in corpora
        if not _usable(tokenizer, tokenizer_dir, corpus, sample)
    ]
    # One missing (or one core): drawn here, below, as the rest is opened.
    workers = min(cores(), len(missing))
    if workers > 1:
        if log:
            log.info("sampling %d segmentations in %d processes", len(missing), workers)
        started = time.monotonic()
        _draw_in_processes(tokenizer_dir, missing, workers)
        if log:
            log.info("sampled them in %.0f s", time.monotonic() - started)
    prepare = functools.partial(prepare_corpus, tokenizer, tokenizer_dir, log=log)
    return [
        [
            prepare(source, langs=langs, sample=sample, aligned=aligned)
            for source, langs, aligned in corpora
        ]
        for sample in samples
    ]


def _usable(
    tokenizer: Tokenizer,
    tokenizer_dir: Path,
    corpus: CorpusInput,
    sample: SegmentationSample,
) -> bool:
    """Whether `corpus` in `sample` is prepared and still right."""
    source, langs, aligned = corpus
    target = corpus_directory(tokenizer_dir, source, langs, sample, aligned)
    try:
        PreparedCorpus.open(target, tokenizer.fingerprint, source.files(langs, aligned), sample)
    except Stale:
        return False
    return True


def _draw_in_processes(
    tokenizer_dir: Path,
    jobs: list[tuple[CorpusInput, SegmentationSample]],
    workers: int,
) -> None:
    """Prepare each (corpus, sample) of `jobs` in a child process,
    `workers` at a time (`main` below); a child's error is raised here as its one line."""
    environ = same_code_environment(dict(os.environ))

    def draw(job: tuple[CorpusInput, SegmentationSample]) -> subprocess.CompletedProcess:
        (source, langs, aligned), sample = job
        record, corpus = json.dumps(sample.record), spec_record(source.spec)
        command = [sys.executable, "-m", __name__, str(tokenizer_dir), corpus, *langs, record]
        command += ["aligned"] if aligned else []
        return subprocess.run(
            command, env=environ, stdin=subprocess.DEVNULL, capture_output=True, text=True
        )

    with ThreadPoolExecutor(workers) as pool:
        for done in pool.map(draw, jobs):
            if done.returncode:
                last = (done.stderr.strip().splitlines() or [""])[-1]
                kind, _, message = last.partition(": ")
                error = {"UserError": UserError, "ResourceError": ResourceError}.get(kind)
                if error is None:
                    raise RuntimeError(f"a sampling process failed:\n{done.stderr[-3000:]}")
                raise error(message)


def main(argv: list[str]) -> int:
    """`python -m seq2seq.data.corpus_encoder TOKENIZER_DIR CORPUS SRC TGT SAMPLE [aligned]`:
    prepare the corpus CORPUS (its spec, JSON) in the sampled segmentation SAMPLE (its
    record, JSON), with its alignments if `aligned`."""
    directory, corpus, src, tgt, record, *aligned = argv
    sample = SegmentationSample(**json.loads(record))
    try:
        tokenizer = Tokenizer.load(Path(directory))
        source = corpus_source(spec_from_record(corpus))
        langs = (src, tgt)
        prepare_corpus(
            tokenizer, Path(directory), source, langs, None, sample, aligned == ["aligned"]
        )
    except UserError as error:
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        return error.exit_code
    return 0


def _remove_leftovers(target: Path) -> None:
    """Remove what a preparation of `target` that was killed left (its temporary
    directory); under the lock, no other process is writing one."""
    if target.parent.is_dir():
        for leftover in target.parent.glob(f".{target.name}.*"):
            shutil.rmtree(leftover, ignore_errors=True)


def _write(
    tokenizer: Tokenizer,
    source: CorpusSource,
    files: dict[str, Path],
    read: Callable[..., Iterator[PairChunk]],
    directory: Path,
    *,
    log,
    sample: SegmentationSample | None,
) -> None:
    """Stream the corpus (`read(digests=...)`, from `files`) into a new prepared corpus
    in `directory`."""
    directory.mkdir()
    digests = {role: hashlib.sha256() for role in files}
    before = {role: _stamp(path) for role, path in files.items()}
    vocab_size = max(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    aligned = ALIGN in files
    writer = CorpusWriter(directory, vocab_size, aligned=aligned)
    try:
        chunks = read(digests=digests)
        empty = _encode(tokenizer, chunks, files.get(ALIGN), writer, log, sample)
        if not writer.pairs:
            raise UserError(f"{source}: every training pair has an empty side; check the corpus")
        for role, path in files.items():
            if _stamp(path) != before[role]:
                raise UserError(f"{path} changed while it was prepared; run the command again")
    except BaseException:
        writer.abandon()
        raise
    records = {role: file_record(path, digests[role].hexdigest()) for role, path in files.items()}
    writer.finish(
        {
            "tokenizer": tokenizer.fingerprint,
            "sample": None if sample is None else sample.record,
            "sources": records,
            "empty": empty,
        }
    )


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def _encode(
    tokenizer: Tokenizer,
    chunks: Iterator[PairChunk],
    align: Path | None,
    writer,
    log,
    sample: SegmentationSample | None,
) -> int:
    """Encode (or sample) and write every pair of `chunks` (with its piece links, where
    the corpus has alignments, read from `align`); the count of pairs dropped for an
    empty side."""
    empty, threads, last_log = 0, cores(), time.monotonic()
    to_pieces = None if align is None else piece_links(tokenizer)
    for index, chunk in enumerate(_read_ahead(chunks)):
        if sample is None:
            src = tokenizer.encode_src(chunk.src, threads)
            tgt = tokenizer.encode_tgt(chunk.tgt, threads)
        else:
            src = tokenizer.sample("src", chunk.src, sample, index)
            tgt = tokenizer.sample("tgt", chunk.tgt, sample, index)
        links = None if to_pieces is None else _links(to_pieces, align, chunk, src, tgt)
        writer.add(src, tgt, links)
        empty += chunk.empty
        if log and time.monotonic() - last_log > _LOG_EVERY:
            log.info("... %d pairs prepared", writer.pairs)
            last_log = time.monotonic()
    return empty


def _links(
    to_pieces: PieceLinks, path: Path, chunk: PairChunk, src: list[list[int]], tgt: list[list[int]]
) -> tuple[np.ndarray, np.ndarray]:
    """The piece links of the pairs of `chunk` (encoded as `src` and `tgt`), from its
    alignments (read from `path`), and how many each pair has."""
    lines = chunk.lines

    def where(pair: int) -> str:
        return f"{path}, line {lines[pair]}"

    return to_pieces(chunk.align, (chunk.src, chunk.tgt), (src, tgt), where)


def piece_links(tokenizer: Tokenizer) -> PieceLinks:
    """The mapping of word links to piece links in `tokenizer`'s segmentations."""
    vocabularies = tokenizer.src_vocabulary(), tokenizer.tgt_vocabulary()
    return PieceLinks(*map(word_starts, vocabularies))


def _read_ahead(chunks: Iterator[PairChunk]) -> Iterator[PairChunk]:
    """The chunks, each read (in a thread) while the one before it is encoded: reading and
    decoding hold the interpreter, SentencePiece's encoding releases it."""
    with ThreadPoolExecutor(1) as reader:
        pending = reader.submit(next, chunks, None)
        while (chunk := pending.result()) is not None:
            pending = reader.submit(next, chunks, None)
            yield chunk


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
