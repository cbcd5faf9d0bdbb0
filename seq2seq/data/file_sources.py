"""Corpora in files: a prefix of two line-aligned files (`{prefix}.{lang}[.gz]`), or one
file of pairs, a pair a line: TSV (`source<TAB>target`) or JSON lines."""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from seq2seq.data.corpus import (
    PairChunk,
    check_counts,
    corpus_path,
    decode_lines,
    raw_lines,
    read_lines,
    read_pairs,
)
from seq2seq.data.prepared_corpus import ALIGN, SIDES
from seq2seq.data.source import CorpusSource, Langs, pair_of
from seq2seq.errors import UserError


class PrefixFiles(CorpusSource):
    """`{prefix}.{lang}` or `{prefix}.{lang}.gz` files, one sentence a line, line-aligned;
    `{prefix}.align`, their word alignments."""

    def files(self, langs: Langs, aligned: bool = False) -> dict[str, Path]:
        suffixes = dict(zip(SIDES, langs, strict=True)) | ({ALIGN: ALIGN} if aligned else {})
        return {role: corpus_path(self.spec, lang).absolute() for role, lang in suffixes.items()}

    def chunks(
        self, langs: Langs, size: int, digests: dict[str, Any] | None = None, aligned: bool = False
    ) -> Iterator[PairChunk]:
        files = self.files(langs, aligned)
        hashes = None if digests is None else tuple(digests[role] for role in files)
        return read_pairs(files["src"], files["tgt"], size, hashes, files.get(ALIGN))

    def _read(self, langs: Langs) -> tuple[list[str], list[str]]:
        src_path, tgt_path = self.files(langs).values()
        src, tgt = read_lines(src_path), read_lines(tgt_path)
        check_counts(src_path, len(src), tgt_path, len(tgt))
        return src, tgt


class PairFile(CorpusSource):
    """One file of pairs, a pair a line (`.gz`: gzipped): how a line holds a pair is the
    kind's (`_pairs`)."""

    @property
    def path(self) -> Path:
        return Path(self.spec)

    def files(self, langs: Langs, aligned: bool = False) -> dict[str, Path]:
        self.refuse_alignments(aligned)
        if not self.path.is_file():
            problem = "is not a regular file" if self.path.exists() else "not found"
            raise UserError(f"corpus file {self.path}: {problem}; check the path")
        return {"pairs": self.path.absolute()}

    def chunks(
        self, langs: Langs, size: int, digests: dict[str, Any] | None = None, aligned: bool = False
    ) -> Iterator[PairChunk]:
        path = self.files(langs, aligned)["pairs"]
        lines = raw_lines(path, None if digests is None else digests["pairs"])
        first = 1
        while raws := list(islice(lines, size)):
            texts = decode_lines(raws, path, first)
            pairs = [self._pairs(text, number, langs) for number, text in enumerate(texts, first)]
            kept = [(s, t) for s, t in pairs if s.strip() and t.strip()]
            first += len(raws)
            yield PairChunk([s for s, _ in kept], [t for _, t in kept], len(pairs) - len(kept))

    def _read(self, langs: Langs) -> tuple[list[str], list[str]]:
        texts = read_lines(self.files(langs)["pairs"])
        pairs = [self._pairs(text, number, langs) for number, text in enumerate(texts, 1)]
        return [pair[0] for pair in pairs], [pair[1] for pair in pairs]

    @abstractmethod
    def _pairs(self, line: str, number: int, langs: Langs) -> tuple[str, str]:
        """The pair that line `number` holds."""


class TsvFile(PairFile):
    """`source<TAB>target` a line."""

    def _pairs(self, line: str, number: int, langs: Langs) -> tuple[str, str]:
        parts = line.split("\t")
        if len(parts) != 2:
            raise UserError(
                f"{self.path}, line {number}: {len(parts) - 1} tabs; a TSV corpus holds "
                "source<TAB>target, one tab a line: fix or remove the line"
            )
        return parts[0], parts[1]


class JsonLines(PairFile):
    """A JSON object a line: `{"de": ..., "en": ...}`, or `{"translation": {...}}` as
    Hugging Face writes it."""

    def _pairs(self, line: str, number: int, langs: Langs) -> tuple[str, str]:
        where = f"{self.path}, line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise UserError(f"{where}: not JSON ({error.msg}); fix or remove the line") from None
        if isinstance(record, dict) and isinstance(record.get("translation"), dict):
            record = record["translation"]
        if not isinstance(record, dict):
            raise UserError(
                f"{where}: not a JSON object; give one a line, "
                f'{{"{langs[0]}": SOURCE, "{langs[1]}": TARGET}}'
            )
        return pair_of(record, langs, where)
