"""What every kind of corpus is (`CorpusSource`): its pairs, whole or in chunks, and the
files they are read from; the kinds are in file_sources.py and hf_dataset.py."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from seq2seq.config import CorpusSpec, corpus_name, describe_corpus
from seq2seq.data.corpus import PairChunk
from seq2seq.errors import UserError

Langs = tuple[str, str]


class ParallelCorpus:
    """Aligned source and target sentences (empty ones kept, in their places), and the
    corpus they came from."""

    def __init__(self, src: list[str], tgt: list[str], source: CorpusSource) -> None:
        self.src, self.tgt, self.source = src, tgt, source

    def __len__(self) -> int:
        return len(self.src)


class CorpusInput(NamedTuple):
    """A training corpus as preparation reads it: its source, the languages of its pair,
    and whether with its word alignments."""

    source: CorpusSource
    langs: Langs
    aligned: bool = False


class CorpusSource(ABC):
    """A corpus in the config (`spec`): its pairs, whole or in chunks, and the files they
    are read from (a prepared corpus records them, to notice a change)."""

    def __init__(self, spec: CorpusSpec) -> None:
        self.spec = spec

    @property
    def name(self) -> str:
        """What its outputs are named by (test/NAME.hyp)."""
        return corpus_name(self.spec)

    def __str__(self) -> str:
        return describe_corpus(self.spec)

    @property
    def identity(self) -> str:
        """What tells two sources apart wherever the command runs (an absolute path)."""
        return str(Path(self.spec).absolute())

    @abstractmethod
    def files(self, langs: Langs, aligned: bool = False) -> dict[str, Path]:
        """The files its pairs are read from, by role, found (or one line naming what is
        missing); `aligned`: with its word alignments (ALIGN)."""

    @abstractmethod
    def chunks(
        self, langs: Langs, size: int, digests: dict[str, Any] | None = None, aligned: bool = False
    ) -> Iterator[PairChunk]:
        """Its pairs, `size` at a time, pairs with an empty side (or one of whitespace only)
        left out and counted; `digests` (hashlib objects by role of `files`) are fed each
        file's bytes as stored, by the time the chunks end."""

    def read(self, langs: Langs) -> ParallelCorpus:
        """All its pairs, checked to be some."""
        src, tgt = self._read(langs)
        if not src:
            raise UserError(f"empty corpus: {self} has no pairs; check it")
        return ParallelCorpus(src, tgt, self)

    @abstractmethod
    def _read(self, langs: Langs) -> tuple[list[str], list[str]]:
        """The sources and the targets of all its pairs."""

    def refuse_alignments(self, aligned: bool) -> None:
        if aligned:
            raise UserError(
                f"{self}: word alignments are read from {{prefix}}.align beside a prefix corpus; "
                "give this corpus as PREFIX.SRC and PREFIX.TGT files, or leave data.alignments "
                "false for it"
            )


def pair_of(record: dict, langs: Langs, where: str) -> tuple[str, str]:
    """The texts of the two languages in a record: each there, text, on one line."""
    pair = []
    for lang in langs:
        text = record.get(lang)
        if not isinstance(text, str):
            found = ", ".join(map(str, record)) or "none"
            problem = "no" if text is None else f"a {type(text).__name__} for"
            raise UserError(
                f"{where}: {problem} {lang!r} text (keys: {found}); each pair needs a text "
                "in both languages of its pair (data.src and data.tgt, or its own)"
            )
        if "\n" in text or "\r" in text:
            raise UserError(
                f"{where}: the {lang} text holds a line break, which a one-line-a-sentence "
                "output cannot keep; replace it with a space"
            )
        pair.append(text)
    return pair[0], pair[1]
