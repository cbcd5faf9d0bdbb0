"""Parallel corpora given by prefix: `{prefix}.{lang}` or `{prefix}.{lang}.gz`, one
sentence per line, strict UTF-8, line-aligned across the two languages."""

from __future__ import annotations

import codecs
import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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
    raise UserError(
        f"corpus file not found: tried {plain} and {packed}; check the prefix and language"
    )


def raw_lines(path: Path) -> Iterator[bytes]:
    """The lines of a plain or gzipped (by `.gz` suffix) file as bytes, without line endings
    and without the UTF-8 byte order mark that some editors put first (it is not text: a
    reference that kept it would not match its hypothesis)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        # Binary iteration splits on b"\n" only; text mode would also split on \x85, \u2028
        # and friends, which would break line alignment with the other language.
        with opener(path, "rb") as handle:
            for number, raw in enumerate(handle):
                if number == 0:
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


def read_lines(path: Path) -> list[str]:
    """All lines of a plain or gzipped UTF-8 file, without line endings; a line that is not
    UTF-8 is an error naming it (a corpus must not lose or shift a line)."""
    lines: list[str] = []
    for number, raw in enumerate(raw_lines(path), start=1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise UserError(
                f"{path}, line {number}: invalid UTF-8; re-encode the file as UTF-8"
            ) from None
    return lines


@dataclass
class ParallelCorpus:
    """Line-aligned source and target sentences, with the files they came from."""

    src: list[str]
    tgt: list[str]
    src_path: Path
    tgt_path: Path

    def __len__(self) -> int:
        return len(self.src)


def read_parallel(prefix: str, src_lang: str, tgt_lang: str) -> ParallelCorpus:
    """Read both sides of a corpus and check that they are non-empty and aligned."""
    src_path = corpus_path(prefix, src_lang)
    tgt_path = corpus_path(prefix, tgt_lang)
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise UserError(
            f"line counts differ: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}; "
            "the files must be line-aligned translations"
        )
    if not src:
        raise UserError(f"empty corpus: {src_path} and {tgt_path} have no lines; check the files")
    return ParallelCorpus(src, tgt, src_path, tgt_path)


def drop_empty(corpus: ParallelCorpus) -> tuple[ParallelCorpus, int]:
    """Remove pairs where either side is empty or whitespace-only; return the count dropped."""
    kept = [(s, t) for s, t in zip(corpus.src, corpus.tgt, strict=True) if s.strip() and t.strip()]
    src = [s for s, _ in kept]
    tgt = [t for _, t in kept]
    return ParallelCorpus(src, tgt, corpus.src_path, corpus.tgt_path), len(corpus) - len(kept)
