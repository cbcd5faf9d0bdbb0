"""Text files as corpora read them: lines of strict UTF-8, plain or gzipped; the pairs
of two line-aligned files (`{prefix}.{lang}` or `{prefix}.{lang}.gz`), in chunks
(`read_pairs`), so that a corpus's size never matters to memory (sources.py reads every
kind of corpus through these).
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO

from seq2seq.errors import UserError


def corpus_path(prefix: str, lang: str) -> Path:
    """`{prefix}.{lang}` if it exists, else `{prefix}.{lang}.gz`."""
    plain = Path(f"{prefix}.{lang}")
    packed = Path(f"{prefix}.{lang}.gz")
    for path in (plain, packed):
        if path.is_file():
            return path
        if path.is_dir():
            raise UserError(f"{path} is a directory, not a corpus file; check the prefix")
        if path.exists():  # a FIFO, a socket, a device: read once or never, not a corpus
            raise UserError(f"{path} is not a regular file; give the corpus as a file")
    raise UserError(
        f"corpus file not found: tried {plain} and {packed}; check the prefix and language"
    )


class _Hashing(io.RawIOBase):
    """A raw reader that feeds every byte it reads to a digest."""

    def __init__(self, raw: BinaryIO, digest: Any) -> None:
        self.raw, self.digest = raw, digest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = self.raw.readinto(buffer)
        if count:
            self.digest.update(memoryview(buffer)[:count])
        return count


@contextlib.contextmanager
def _opened(path: Path, digest: Any = None) -> Iterator[BinaryIO]:
    """The file's (uncompressed) bytes; `digest` sees the bytes of the file as stored."""
    with open(path, "rb") as raw:
        stored = raw if digest is None else io.BufferedReader(_Hashing(raw, digest), 1 << 20)
        if path.suffix != ".gz":
            yield stored
            return
        with gzip.GzipFile(fileobj=stored, mode="rb") as unpacked:
            yield unpacked


def raw_lines(path: Path, digest: Any = None) -> Iterator[bytes]:
    """The lines of a plain or gzipped (by `.gz` suffix) file as bytes, without line endings
    and without the UTF-8 byte order mark that some editors put first (it is not text: a
    reference that kept it would not match its hypothesis). A hashlib `digest`, if given,
    is fed the file's bytes as stored as they are read."""
    path = Path(path)
    try:
        # Binary iteration splits on b"\n" only; text mode would also split on \x85, \u2028
        # and friends, which would break line alignment with the other language.
        with _opened(path, digest) as handle:
            for number, raw in enumerate(handle):
                if number == 0:
                    _refuse_utf16(raw, path)
                    raw = raw.removeprefix(codecs.BOM_UTF8)
                if raw.endswith(b"\r\n"):
                    yield raw[:-2]
                elif raw.endswith(b"\n"):
                    yield raw[:-1]
                else:
                    yield raw
    except FileNotFoundError:
        raise UserError(f"{path}: file not found; check the path") from None
    except (gzip.BadGzipFile, EOFError, zlib.error):
        raise UserError(
            f"{path}: not a valid gzip file; re-download it or remove the .gz suffix"
        ) from None
    except OSError as error:
        raise UserError(
            f"{path}: cannot read ({error.strerror or error}); check the file"
        ) from None


def _refuse_utf16(first: bytes, path: Path) -> None:
    """One line for a file that starts with a UTF-16 or UTF-32 byte order mark: its lines
    would split between the bytes of its characters, and the error would be elsewhere."""
    marks = {"UTF-32": (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)}
    marks["UTF-16"] = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
    for name, boms in marks.items():
        if first.startswith(boms):
            raise UserError(f"{path} is {name}, not UTF-8; re-encode the file as UTF-8")


def read_lines(path: Path) -> list[str]:
    """All lines of a plain or gzipped UTF-8 file, without line endings; a line that is not
    UTF-8 is an error naming it (a corpus must not lose or shift a line)."""
    return decode_lines(list(raw_lines(path)), path, 1)


def decode_lines(raws: list[bytes], path: Path, first: int) -> list[str]:
    """Lines `first`, `first + 1`, ... of `path`, decoded as strict UTF-8 (all at once: a
    line holds no newline byte, and no UTF-8 character contains one)."""
    if not raws:
        return []
    try:
        return b"\n".join(raws).decode("utf-8").split("\n")
    except UnicodeDecodeError:
        for number, raw in enumerate(raws, start=first):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                raise UserError(
                    f"{path}, line {number}: invalid UTF-8; re-encode the file as UTF-8"
                ) from None
        raise


def check_counts(src_path: Path, src_lines: int, tgt_path: Path, tgt_lines: int) -> None:
    if src_lines != tgt_lines:
        raise UserError(
            f"line counts differ: {src_path} has {src_lines} lines, {tgt_path} has {tgt_lines}; "
            "the files must be line-aligned translations"
        )
    if not src_lines:
        raise UserError(f"empty corpus: {src_path} and {tgt_path} have no lines; check the files")


@dataclass
class PairChunk:
    """Consecutive pairs of a corpus with both sides non-empty, and how many were dropped;
    with alignments, each pair's Pharaoh line and the number of its lines in the files."""

    src: list[str]
    tgt: list[str]
    empty: int
    align: list[str] | None = None
    lines: list[int] | None = None


def read_pairs(
    src_path: Path,
    tgt_path: Path,
    chunk: int,
    digests: tuple[Any, ...] | None = None,
    align_path: Path | None = None,
) -> Iterator[PairChunk]:
    """The pairs of two files, `chunk` lines at a time, checked (aligned, not empty,
    UTF-8), pairs with an empty side (or one of
    whitespace only) dropped; with `align_path`, each with its line of that file (which
    must have as many). `digests` (hashlib objects, one a file) are fed each file's bytes
    as stored."""
    paths = [src_path, tgt_path] + ([] if align_path is None else [align_path])
    streams = [
        raw_lines(path, digest)
        for path, digest in zip(paths, digests or [None] * len(paths), strict=True)
    ]
    first = 1  # the number of the chunk's first line
    while True:
        raws = [list(islice(lines, chunk)) for lines in streams]
        if len({len(raw) for raw in raws}) > 1 or not raws[0]:
            counts = [
                first - 1 + len(raw) + sum(1 for _ in lines)
                for raw, lines in zip(raws, streams, strict=True)
            ]
            check_counts(src_path, counts[0], tgt_path, counts[1])
            if align_path is not None:
                check_counts(src_path, counts[0], align_path, counts[2])
            return
        texts = [decode_lines(raw, path, first) for raw, path in zip(raws, paths, strict=True)]
        pairs = zip(texts[0], texts[1], strict=True)
        kept = [i for i, (s, t) in enumerate(pairs) if s.strip() and t.strip()]
        if len(kept) < len(raws[0]):
            texts = [[lines[i] for i in kept] for lines in texts]
        align, numbers = None, None
        if align_path is not None:
            align, numbers = texts[2], [first + i for i in kept]
        first += len(raws[0])
        yield PairChunk(texts[0], texts[1], len(raws[0]) - len(kept), align, numbers)
