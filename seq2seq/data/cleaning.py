"""Cleaning a training corpus at prepare: its pairs through the filters `data.filters`
turns on (filters.py), on every core, into the pairs kept, written as a prefix corpus
with a report (`report.json`: how many pairs each filter dropped, and examples) in the
tokenizer directory's `corpora/`. The tokenizer is trained on, and the corpus prepared
from, what is kept; a corpus cleaned with the same filters from unchanged files is not
cleaned again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from seq2seq.config import DataConfig
from seq2seq.config.filters import FiltersConfig
from seq2seq.data.cleaning_report import EMPTY, CleaningReport
from seq2seq.data.corpus import PairChunk
from seq2seq.data.corpus_encoder import CHUNK_PAIRS, cores
from seq2seq.data.file_sources import PrefixFiles
from seq2seq.data.filters import checks, normalizers
from seq2seq.data.prepared_corpus import ALIGN, SIDES, file_record, same_file
from seq2seq.data.source import CorpusSource, Langs
from seq2seq.data.sources import corpus_source
from seq2seq.data.tokenizer import CORPORA
from seq2seq.errors import UserError
from seq2seq.files import atomic_write_text, publish_directory

CLEANED_FORMAT = 1
MANIFEST = "cleaned.json"  # what it was cleaned from and with, and what it wrote
REPORT = "report.json"
SHARD = 2_000  # pairs a worker checks at a time
_IN_FLIGHT = 4  # shards a worker may have waiting


class Cleaner:
    """The normalisers and filters of one corpus, built in this process."""

    def __init__(self, settings: FiltersConfig, langs: Langs, warn: Callable[[str], None]) -> None:
        self.settings = settings
        self.normalize = normalizers(settings.normalize, langs)
        self.checks = checks(settings, langs, warn, in_order=False)
        self.ordered = checks(settings, langs, warn, in_order=True)

    @property
    def names(self) -> list[str]:
        return [EMPTY] + [name for name, _ in self.checks + self.ordered]

    def report(self, corpus: str) -> CleaningReport:
        """An empty report of this cleaning of `corpus`."""
        return CleaningReport(corpus, self.settings.model_dump(), 0, dict.fromkeys(self.names, 0))

    def verdicts(self, src: list[str], tgt: list[str]) -> tuple:
        """The pairs normalised (None where nothing is), the number in `names` of the
        first of `checks` that drops each (0: none), and the keys of the kept ones for
        each ordered check."""
        normalized = None
        if self.normalize:
            src, tgt = self.normalize(src, 0), self.normalize(tgt, 1)
            normalized = src, tgt
        firsts = np.zeros(len(src), np.int8)
        keys: list[list[int]] = [[] for _ in self.ordered]
        for index, (s, t) in enumerate(zip(src, tgt, strict=True)):
            firsts[index] = next(
                (number for number, (_, drops) in enumerate(self.checks, 1) if drops(s, t)), 0
            )
            if not firsts[index]:  # at once: `folded`'s cache still holds the pair
                for found, (_, check) in zip(keys, self.ordered, strict=True):
                    found.append(check.key(s, t))
        keys = [np.array(found, np.int64) for found in keys]
        return normalized, firsts, keys


_WORKER: Cleaner | None = None


def _start_worker(settings: dict, langs: Langs) -> None:
    global _WORKER
    _WORKER = Cleaner(FiltersConfig(**settings), langs, lambda message: None)


def _worker_verdicts(src: list[str], tgt: list[str]) -> tuple:
    assert _WORKER is not None
    return _WORKER.verdicts(src, tgt)


def clean_chunks(
    chunks: Iterable[PairChunk], cleaner: Cleaner, report: CleaningReport, pool: Executor | None
) -> Iterator[PairChunk]:
    """The pairs of `chunks` that every filter keeps, counted into `report`; the filters
    run in `pool` (or here), the ordered ones here, in order."""
    for kept, _ in judged_chunks(chunks, cleaner, report, pool):
        yield kept


def judged_chunks(
    chunks: Iterable[PairChunk], cleaner: Cleaner, report: CleaningReport, pool: Executor | None
) -> Iterator[tuple[PairChunk, np.ndarray]]:
    """As `clean_chunks`, a shard of a chunk at a time, with the verdict on each of its
    pairs: the number in `cleaner.names` of the filter that dropped it (0: kept)."""
    run = _worker_verdicts if pool is not None else cleaner.verdicts
    shards = ((chunk, start) for chunk in chunks for start in range(0, len(chunk.src) or 1, SHARD))

    def submit(item: tuple[PairChunk, int]) -> Future | tuple:
        chunk, start = item
        part = chunk.src[start : start + SHARD], chunk.tgt[start : start + SHARD]
        return pool.submit(run, *part) if pool is not None else run(*part)

    for (chunk, start), done in _in_order(shards, submit, _IN_FLIGHT * cores()):
        report.add_empty(chunk.empty if start == 0 else 0)
        yield _kept(chunk, start, done, cleaner, report), done[1]


def _in_order(items: Iterator, submit: Callable, window: int) -> Iterator[tuple[Any, Any]]:
    """(item, result) of each item, in order, at most `window` submitted ahead."""
    pending: deque = deque()
    for item in items:
        pending.append((item, submit(item)))
        if len(pending) >= window:
            yield _result(*pending.popleft())
    while pending:
        yield _result(*pending.popleft())


def _result(item: Any, done: Any) -> tuple[Any, Any]:
    return item, done.result() if isinstance(done, Future) else done


def _kept(chunk: PairChunk, start: int, done: tuple, cleaner: Cleaner, report) -> PairChunk:
    """The pairs of a shard of `chunk` that its verdicts `done` keep, the ordered checks
    run on them; the others counted (and the first shown) in `report`."""
    normalized, firsts, keys = done
    end = start + len(firsts)
    src, tgt = normalized or (chunk.src[start:end], chunk.tgt[start:end])
    kept = np.flatnonzero(firsts == 0)
    alive = np.ones(len(kept), bool)
    for number, ((_, check), found) in enumerate(zip(cleaner.ordered, keys, strict=True)):
        drops = np.zeros(len(kept), bool)
        drops[alive] = check.drops(found[alive])
        firsts[kept[drops]] = 1 + len(cleaner.checks) + number
        alive &= ~drops
    kept = kept[alive]
    report.count(firsts, src, tgt, cleaner.names)
    align = None if chunk.align is None else [chunk.align[start + i] for i in kept]
    lines = None if chunk.lines is None else [chunk.lines[start + i] for i in kept]
    return PairChunk([src[i] for i in kept], [tgt[i] for i in kept], 0, align, lines)


def cleaned_source(
    source: CorpusSource,
    settings: FiltersConfig,
    tokenizer_dir: Path,
    langs: Langs,
    aligned: bool = False,
    log: logging.Logger | None = None,
) -> CorpusSource:
    """`source` as cleaned by `settings` (itself where they change nothing): the pairs kept,
    from the last cleaning where it still holds, else cleaned now (hold the preparation
    lock around it)."""
    if not settings.active:
        return source
    files = source.files(langs, aligned)
    about = {"format": CLEANED_FORMAT, "filters": settings.model_dump(), "langs": list(langs)}
    where = hashlib.sha256(f"{source.identity}\n{json.dumps(about, sort_keys=True)}".encode())
    name = f"{source.name}.{'-'.join(langs)}.cleaned-{where.hexdigest()[:12]}"
    target = Path(tokenizer_dir) / CORPORA / name
    kept = PrefixFiles(str(target / source.name))
    if not _still_right(target, about, files):
        if log:
            log.info("cleaning %s into %s", source, target)
        fill = functools.partial(
            _write_cleaned, source, settings, langs, aligned, files, about, log
        )
        publish_directory(target, fill, replace=True)
    if log:
        report = json.loads((target / REPORT).read_text("utf-8"))
        log.info("%s (report: %s)", report["summary"], target / REPORT)
    return kept


def _still_right(target: Path, about: dict, files: dict[str, Path]) -> bool:
    """Whether `target` holds a cleaning made as `about` says from `files` as they are,
    its own files as it wrote them."""
    try:
        manifest = json.loads((target / MANIFEST).read_text("utf-8"))
        if {key: manifest.get(key) for key in about} != about:
            return False
        if set(manifest["sources"]) != set(files):
            return False
        records = [(files[role], manifest["sources"][role]) for role in files]
        records += [(target / record["path"], record) for record in manifest["kept"].values()]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return all(same_file(path, record)[0] for path, record in records)


def _write_cleaned(
    source: CorpusSource,
    settings: FiltersConfig,
    langs: Langs,
    aligned: bool,
    files: dict[str, Path],
    about: dict,
    log: logging.Logger | None,
    directory: Path,
) -> None:
    """Clean `source` into `directory`: `{name}.{lang}` (and `.align`), its report and
    its manifest."""
    directory.mkdir()
    digests = {role: hashlib.sha256() for role in files}
    cleaner = Cleaner(settings, langs, log.warning if log else lambda message: None)
    report = cleaner.report(str(source))
    suffixes = dict(zip(SIDES, langs, strict=True)) | ({ALIGN: ALIGN} if aligned else {})
    paths = {role: directory / f"{source.name}.{suffix}" for role, suffix in suffixes.items()}
    written = {role: hashlib.sha256() for role in paths}
    chunks = source.chunks(langs, CHUNK_PAIRS, digests, aligned)
    with filter_pool(settings, langs) as pool:
        handles = {role: open(path, "xb") for role, path in paths.items()}
        try:
            for chunk in clean_chunks(chunks, cleaner, report, pool):
                texts = {"src": chunk.src, "tgt": chunk.tgt, ALIGN: chunk.align}
                for role, handle in handles.items():
                    data = "".join(line + "\n" for line in texts[role]).encode("utf-8")
                    handle.write(data)
                    written[role].update(data)
        finally:
            for handle in handles.values():
                handle.close()
    if not report.kept:
        raise UserError(f"every pair was dropped: {report.summary()}; loosen data.filters")
    atomic_write_text(directory / REPORT, json.dumps(report.to_dict(), indent=2) + "\n")
    manifest = about | {
        "sources": {
            role: file_record(path, digests[role].hexdigest()) for role, path in files.items()
        },
        "kept": {  # by name: the directory is renamed into place
            role: file_record(path, written[role].hexdigest()) | {"path": path.name}
            for role, path in paths.items()
        },
    }
    atomic_write_text(directory / MANIFEST, json.dumps(manifest, indent=2) + "\n")


def filter_pool(settings: FiltersConfig, langs: Langs) -> Any:
    """Processes that run the filters, one a core (none on one core)."""
    workers = cores()
    if workers < 2:
        return contextlib.nullcontext(None)
    return ProcessPoolExecutor(
        workers,
        mp_context=get_context("spawn"),
        initializer=_start_worker,
        initargs=(settings.model_dump(), langs),
    )


def dry_run(data: DataConfig, pairs: int, warn: Callable[[str], None]) -> list[CleaningReport]:
    """What `data.filters` would drop of the first `pairs` pairs of each training corpus;
    nothing is written."""
    reports = []
    for corpus, settings in zip(data.train_corpora, data.corpus_filters, strict=True):
        source, langs = corpus_source(corpus), data.pair(corpus)
        cleaner = Cleaner(settings, langs, warn)
        report = cleaner.report(str(source))
        chunks = _first(source.chunks(langs, min(pairs, CHUNK_PAIRS)), pairs)
        with filter_pool(settings, langs) as pool:
            for _ in clean_chunks(chunks, cleaner, report, pool):
                pass
        reports.append(report)
    return reports


def _first(chunks: Iterator[PairChunk], pairs: int) -> Iterator[PairChunk]:
    """The chunks of a corpus's first `pairs` pairs (empty ones counted)."""
    left = pairs
    for chunk in chunks:
        if left <= chunk.empty:
            yield PairChunk([], [], left)
            return
        take = left - chunk.empty
        yield PairChunk(chunk.src[:take], chunk.tgt[:take], chunk.empty)
        left = take - len(chunk.src[:take])
        if not left:
            return
