"""Sequence-level knowledge distillation (`seq2seq distill`; Kim and Rush, 2016): a teacher
(one trained run, or an ensemble) translates the sources of a student's training corpora,
and the student trains on the sources paired with those translations.

Each training corpus becomes a distilled corpus of prefix files beside it, `NAME.kd-KEY.SRC`
and `.TGT`, with `NAME.kd-KEY.json`, its manifest: the teachers (run, checkpoint, the
checkpoint file's SHA-256), the decoding options and the source's files, whose hash is KEY,
so that another teacher or other options make another corpus and the same ones reuse it.
The translation goes in chunks of `CHUNK_PAIRS` pairs, each written to `NAME.kd-KEY.parts/`
as it is done: a kill loses at most the chunks being translated, and running again goes on
with the others; chunks are the same whatever the number of processes (`jobs`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from tqdm import tqdm

from seq2seq.checkpoint import RunDir
from seq2seq.config import (
    Config,
    CorpusSpec,
    DatasetCorpus,
    PathCorpus,
    config_from_dict,
    corpus_name,
    corpus_path,
    describe_corpus,
)
from seq2seq.data.prepared_corpus import file_sha256
from seq2seq.data.sources import corpus_source
from seq2seq.decode.ensemble import pair_members
from seq2seq.decode.line_translator import decode_options
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError
from seq2seq.files import atomic_write, atomic_write_text
from seq2seq.train.distillation import teacher_target
from seq2seq.train.logs import duration_words

_FORMAT = 1  # of the manifest
# Pairs a chunk: what a kill may lose, and what one process translates at a time (a
# corpus of fewer chunks than --jobs keeps some processes idle).
CHUNK_PAIRS = 2_000
PROGRESS_SECONDS = 60  # between the progress lines of a log file (a terminal has a bar)


@dataclass(frozen=True)
class Teachers:
    """Who translates, and how: runs and checkpoints as `Translator.load` takes them, and
    the decoding options changed from the first run's decode section."""

    runs: tuple[Path, ...]
    checkpoints: tuple[str, ...] = ("best",)
    decode: tuple[tuple[str, Any], ...] = ()  # (field, value) pairs, None values left out

    def identity(self) -> dict[str, Any]:
        """The manifest's record of the teachers and their decoding options, in full."""
        first = RunDir(self.runs[0]).load_config()
        options = decode_options(first.decode, dict(self.decode))
        members = [
            {"run": str(run.absolute()), "checkpoint": name, "sha256": _checkpoint_sha(run, name)}
            for run, name in pair_members(list(self.runs), list(self.checkpoints))
        ]
        return {"teachers": members, "decode": options.model_dump(mode="json")}


def _checkpoint_sha(run: Path, name: str) -> str:
    return file_sha256(RunDir(run).resolve_checkpoint(name))


@dataclass(frozen=True)
class DistilledCorpus:
    """Where one training corpus's distilled corpus goes, and what it must record."""

    corpus: CorpusSpec
    langs: tuple[str, str]
    prefix: Path  # NAME.kd-KEY: the text files are PREFIX.SRC and PREFIX.TGT
    manifest: dict[str, Any]
    tgt_lang: str | None  # what the teacher is asked to translate into (`teacher_target`)

    @property
    def name(self) -> str:
        """The corpus as messages name it."""
        return describe_corpus(self.corpus)

    @property
    def manifest_path(self) -> Path:
        return self.prefix.with_name(self.prefix.name + ".json")

    @property
    def parts(self) -> Path:
        return self.prefix.with_name(self.prefix.name + ".parts")

    def done(self) -> bool:
        """Whether it was made, by these teachers with these options from these files."""
        try:
            return json.loads(self.manifest_path.read_text("utf-8")) == self.manifest
        except (OSError, ValueError):
            return False

    def spec(self) -> PathCorpus:
        """The distilled corpus as a corpus of the student's config."""
        return PathCorpus(path=str(self.prefix), src=self.langs[0], tgt=self.langs[1])


def planned(cfg: Config, teachers: Teachers, out: Path | None) -> list[DistilledCorpus]:
    """The distilled corpus of each of the student's training corpora: beside it (a
    dataset's in data/distilled/), or in `out`; one line for a corpus of a pair the
    teacher does not translate, before any is translated."""
    about = teachers.identity()
    taught = RunDir(teachers.runs[0]).load_config().data
    found = []
    for corpus in cfg.data.train_corpora:
        langs = cfg.data.pair(corpus)
        tgt_lang = teacher_target(teachers.runs[0], taught, corpus, langs)
        source = corpus_source(corpus)
        sources = {role: file_sha256(path) for role, path in source.files(langs).items()}
        if isinstance(corpus, DatasetCorpus):  # which dataset, split and columns (a hub
            sources["dataset"] = source.identity  # dataset has no files here to hash)
        manifest = {"format": _FORMAT, **about, "langs": list(langs), "sources": sources}
        key = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:12]
        home = Path("data/distilled") if isinstance(corpus, DatasetCorpus) else None
        where = out or home or Path(corpus_path(corpus)).parent  # type: ignore[arg-type]
        prefix = where / f"{corpus_name(corpus)}.kd-{key}"
        found.append(DistilledCorpus(corpus, langs, prefix, manifest, tgt_lang))
    return found


def distill(
    plan: list[DistilledCorpus], teachers: Teachers, jobs: int, log: logging.Logger
) -> None:
    """Make each distilled corpus of `plan` not made yet, translating its chunks not done
    on `jobs` processes."""
    for distilled in plan:
        if distilled.done():
            log.info("%s: distilled already (%s)", distilled.name, distilled.prefix)
        else:
            _distill_one(distilled, teachers, jobs, log)


def _distill_one(
    distilled: DistilledCorpus, teachers: Teachers, jobs: int, log: logging.Logger
) -> None:
    distilled.parts.mkdir(parents=True, exist_ok=True)
    chunks = list(_chunks(distilled))
    missing = [(number, src) for number, src in chunks if not _part(distilled, number).is_file()]
    total = sum(len(src) for _, src in chunks)
    left = sum(len(src) for _, src in missing)
    log.info(
        "%s: translating %d of its %d pairs with %d process(es) into %s",
        *(distilled.name, left, total, jobs, distilled.prefix),
    )
    with tqdm(total=total, initial=total - left, unit="pair", disable=None) as bar:
        logged = _LoggedProgress(log, total, total - left)
        for lines in _translate(distilled, missing, teachers, jobs):
            bar.update(lines)
            if bar.disable:  # not a terminal: a log file, where the bar stays quiet
                logged.update(lines)
    _assemble(distilled, [number for number, _ in chunks])
    log.info("%s: distilled into %s (%d pairs)", distilled.name, distilled.prefix, total)


class _LoggedProgress:
    """The pairs translated so far, their rate and the time left, as a log line at most
    every PROGRESS_SECONDS, and once all are done."""

    def __init__(self, log: logging.Logger, total: int, done: int) -> None:
        self.log, self.total, self.done, self.first = log, total, done, done
        self.started = self.shown = time.monotonic()

    def update(self, lines: int) -> None:
        self.done += lines
        now = time.monotonic()
        if now - self.shown < PROGRESS_SECONDS and self.done < self.total:
            return
        self.shown = now
        rate = (self.done - self.first) / max(now - self.started, 1e-9)
        left = duration_words((self.total - self.done) / rate) if rate else "?"
        self.log.info(
            "translated %d of %d pairs (%.1f pairs/s; about %s left)",
            *(self.done, self.total, rate, left),
        )


def _chunks(distilled: DistilledCorpus) -> Iterator[tuple[int, list[str]]]:
    """(number, sources) of each chunk of the corpus's pairs, as preparation reads them."""
    source = corpus_source(distilled.corpus)
    for number, chunk in enumerate(source.chunks(distilled.langs, CHUNK_PAIRS)):
        yield number, chunk.src


def _part(distilled: DistilledCorpus, number: int) -> Path:
    return distilled.parts / f"{number:06d}.json"


def _translate(
    distilled: DistilledCorpus, missing: list, teachers: Teachers, jobs: int
) -> Iterator[int]:
    """Translate each missing chunk into its part file; the lines of each, as it is done."""
    work = [(str(_part(distilled, n)), src, distilled.tgt_lang) for n, src in missing]
    if jobs == 1:
        _load_teacher(teachers, 0)
        yield from map(_translate_chunk, work)
        return
    threads = max((os.cpu_count() or 1) // jobs, 1)
    with ProcessPoolExecutor(
        jobs, get_context("spawn"), initializer=_load_teacher, initargs=(teachers, threads)
    ) as pool:
        yield from pool.map(_translate_chunk, work)


_TEACHER: Translator | None = None  # the process's teacher (`_load_teacher`)


def _load_teacher(teachers: Teachers, threads: int) -> None:
    """Load the teacher once in this process (threads 0: as the translator chooses)."""
    global _TEACHER
    _TEACHER = Translator.load(
        list(teachers.runs),
        list(teachers.checkpoints),
        threads=threads or None,
        **dict(teachers.decode),
    )


def _translate_chunk(work: tuple[str, list[str], str | None]) -> int:
    """Translate one chunk's sources and write them with their translations, at once."""
    path, sources, tgt_lang = work
    assert _TEACHER is not None
    translations = _TEACHER.translate(sources, tgt_lang=tgt_lang)
    atomic_write_text(Path(path), json.dumps({"src": sources, "tgt": translations}) + "\n")
    return len(sources)


def _assemble(distilled: DistilledCorpus, numbers: list[int]) -> None:
    """The part files, in order, into PREFIX.SRC and PREFIX.TGT, then the manifest (the
    mark of a finished corpus), then the parts removed."""
    for side, language in zip(("src", "tgt"), distilled.langs, strict=True):

        def write(handle: Any, side: str = side) -> None:
            for number in numbers:
                part = json.loads(_part(distilled, number).read_text("utf-8"))
                handle.write("".join(f"{line}\n" for line in part[side]).encode("utf-8"))

        atomic_write(Path(f"{distilled.prefix}.{language}"), write)
    atomic_write_text(distilled.manifest_path, json.dumps(distilled.manifest, indent=2) + "\n")
    for number in numbers:
        _part(distilled, number).unlink()
    distilled.parts.rmdir()


def student_config(cfg: Config, plan: list[DistilledCorpus], original: float | None) -> Config:
    """The student's config trained on its distilled corpora in place of its own, or with
    `original` (a weight) beside them: each original corpus then weighs `original` times
    its data.weights. The distilled corpora keep their corpus's tag and cleaning, and have
    no word alignments."""
    data = cfg.data
    distilled = [entry.spec().model_dump() for entry in plan]
    weights, tags, filters = data.weights, data.tags, data.filters
    fields: dict[str, Any] = {"train": distilled, "alignments": False}
    if original is not None:
        own = weights or [1.0] * len(plan)
        fields = {
            "train": [*distilled, *(_dumped(corpus) for corpus in data.train_corpora)],
            "weights": [*own, *(weight * original for weight in own)],
            "tags": None if tags is None else [*tags, *tags],
            "alignments": [False] * len(plan) + data.aligned,
            "filters": [*data.corpus_filters] * 2 if filters else [],
        }
    changed = cfg.data.model_dump(mode="json") | fields
    try:
        return config_from_dict(cfg.model_dump(mode="json") | {"data": changed})
    except UserError as error:  # --original-weight out of data.weights' range
        raise UserError(f"--original-weight {original}: {error}") from None


def _dumped(corpus: CorpusSpec) -> Any:
    return corpus if isinstance(corpus, str) else corpus.model_dump(mode="json")
