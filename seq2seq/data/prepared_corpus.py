"""A prepared training corpus: the piece ids of its pairs in flat files that every process
reads from the page cache instead of holding, kept in the tokenizer directory that made
them.

```
tokenizer/corpora/NAME/  manifest.json   what it was made from; each file's dtype, size, hash
                         src.ids tgt.ids          piece ids, one flat array per side
                         src.offsets tgt.offsets  int64: where pair i starts (pairs + 1)
                         align.ids align.offsets  with alignments (data.alignments): the
                                                  int32 (source, target) piece links of
                                                  each pair, flat
```

Ids are uint16 where the vocabulary has at most 65,536 pieces, else uint32; pair i of a
side is `ids[offsets[i]:offsets[i + 1]]`. Nothing here is a Python object per pair, and a
file is one copy in the page cache for every process that reads it.

The manifest records the tokenizer's fingerprint, the segmentation sample (subword
regularization: its settings, or null for the tokenizer's best segmentation) and, for each
source text file and each file written, its size, modification time and SHA-256 (computed
once, while it was written). Opening compares sizes and times only; a file whose size or
time differs is hashed, and a different hash means the corpus must be prepared again
(`Stale`). The manifest is sealed with the hash of the rest of it, so that an edited one
is found too. So an unchanged corpus is never read again, and a changed or damaged one is
never used.
"""

from __future__ import annotations

import hashlib
import json
import os
from itertools import chain
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from seq2seq.data.tokenizer import SegmentationSample
from seq2seq.errors import UserError
from seq2seq.files import atomic_write_text

FORMAT = 2  # 1: manifests without their seal
SEAL = "seal"  # the manifest's hash of the rest of it: an edited manifest is found
MANIFEST = "manifest.json"
SIDES = ("src", "tgt")
ALIGN = "align"  # the piece links of a corpus with alignments, stored as a third side
_HASH_BLOCK = 1 << 20


class Stale(Exception):
    """Why a prepared corpus cannot be used as it is (it is then prepared again)."""


def id_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned type that holds every piece id of the vocabulary."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def file_sha256(path: Path) -> str:
    return feed_file(path, hashlib.sha256()).hexdigest()


def feed_file(path: Path, digest: Any) -> Any:
    """Feed a file's bytes to a hashlib `digest`; the digest."""
    with open(path, "rb") as handle:
        while block := handle.read(_HASH_BLOCK):
            digest.update(block)
    return digest


def file_record(path: Path, sha256: str) -> dict:
    """What the manifest keeps of a file: enough to tell, without reading it, that it is
    unchanged (size, modification time), and to tell for sure when those differ (hash)."""
    stat = Path(path).stat()
    return {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256}


def same_file(path: Path, record: dict) -> tuple[bool, bool]:
    """(the content is the one recorded, the record's size and time still hold). A file
    whose size or time differs is hashed; a missing or unreadable one differs."""
    try:
        stat = Path(path).stat()
        if (stat.st_size, stat.st_mtime_ns) == (record["size"], record["mtime_ns"]):
            return True, True
        if stat.st_size != record["size"]:
            return False, False
        return file_sha256(path) == record["sha256"], False
    except (OSError, KeyError, TypeError):
        return False, False


class _HashedFile:
    """A file written from numpy arrays, hashed as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle: BinaryIO = open(path, "xb")
        self.digest = hashlib.sha256()

    def write(self, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array).data
        self.handle.write(data)
        self.digest.update(data)

    def close(self) -> str:
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        return self.digest.hexdigest()


class CorpusWriter:
    """Writes a prepared corpus into an empty directory, a chunk of pairs at a time; the
    manifest, written last by `finish`, is what makes it complete."""

    def __init__(self, directory: Path, vocab_size: int, aligned: bool = False) -> None:
        self.directory = Path(directory)
        self.sides = (*SIDES, ALIGN) if aligned else SIDES
        self.dtypes = {**dict.fromkeys(SIDES, id_dtype(vocab_size)), ALIGN: np.dtype(np.int32)}
        self.files = {
            f"{side}.{kind}": _HashedFile(self.directory / f"{side}.{kind}")
            for side in self.sides
            for kind in ("ids", "offsets")
        }
        self.tokens = dict.fromkeys(self.sides, 0)
        self.longest = dict.fromkeys(SIDES, 0)
        self.pairs = 0
        for side in self.sides:
            self.files[f"{side}.offsets"].write(np.zeros(1, np.int64))

    def add(
        self,
        src: list[list[int]],
        tgt: list[list[int]],
        links: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """Append pairs: the piece ids of each side (lists, as SentencePiece returns them)
        and, for a corpus with alignments, their piece links ((M, 2), pair after pair) and
        how many each pair has."""
        for side in self.sides:
            if side == ALIGN:
                ids, lengths = links[0].ravel(), 2 * links[1]
            else:
                rows = src if side == "src" else tgt
                lengths = np.fromiter(map(len, rows), np.int64, count=len(rows))
                flat = chain.from_iterable(rows)
                ids = np.fromiter(flat, self.dtypes[side], count=int(lengths.sum()))
                self.longest[side] = max(self.longest[side], int(lengths.max(initial=0)))
            self.files[f"{side}.ids"].write(ids)
            self.files[f"{side}.offsets"].write(self.tokens[side] + np.cumsum(lengths))
            self.tokens[side] += ids.size
        self.pairs += len(src)

    def finish(self, about: dict) -> None:
        """Close the files and write the manifest: `about` (the tokenizer, the source files,
        the counts of dropped pairs) with what was written."""
        files = {}
        for name, file in self.files.items():
            sha256 = file.close()
            record = file_record(file.path, sha256)
            del record["path"]  # inside the directory, wherever it is moved or copied
            side, kind = name.split(".")
            dtype = self.dtypes[side] if kind == "ids" else np.dtype(np.int64)
            count = self.tokens[side] if kind == "ids" else self.pairs + 1
            files[name] = {**record, "dtype": dtype.name, "count": count}
        manifest = {
            "format": FORMAT,
            **about,
            "pairs": self.pairs,
            "tokens": {side: self.tokens[side] for side in SIDES},
            "longest": self.longest,
            "files": files,
        }
        write_manifest(self.directory, manifest)

    def abandon(self) -> None:
        for file in self.files.values():
            file.handle.close()


class Side:
    """One language of a prepared corpus: pair i is ids offsets[i] .. offsets[i + 1] - 1.

    Read with positioned reads (`os.pread`, safe from any thread) of its files, kept open:
    what is read comes from the page cache that every process on the machine shares, and
    nothing of the files stays in this process. (A shared map of them would be the same
    pages, but a map counts whole large folios of them in each process's resident set as
    soon as a row is touched, and a file truncated under it kills the process, SIGBUS.)
    """

    def __init__(self, directory: Path, side: str, files: dict) -> None:
        self.ids_path = Path(directory) / f"{side}.ids"
        self.offsets_path = Path(directory) / f"{side}.offsets"
        self.dtype = np.dtype(files[f"{side}.ids"]["dtype"])
        self.tokens: int = files[f"{side}.ids"]["count"]
        self.pairs: int = files[f"{side}.offsets"]["count"] - 1
        self._ids = open(self.ids_path, "rb", buffering=0)
        self._offsets = open(self.offsets_path, "rb", buffering=0)

    def _read(self, file: BinaryIO, offset: int, size: int) -> bytes:
        data = os.pread(file.fileno(), size, offset)
        if len(data) != size:
            raise UserError(
                f"{file.name} is shorter than when it was prepared (truncated since?); run "
                "the same command again: it prepares the corpus anew"
            )
        return data

    def offsets(self, start: int, stop: int) -> np.ndarray:
        """offsets[start] .. offsets[stop], int64."""
        return np.frombuffer(self._read(self._offsets, start * 8, (stop - start + 1) * 8), np.int64)

    def lengths(self, start: int, stop: int) -> np.ndarray:
        """Pieces of pairs start .. stop - 1 (int64)."""
        return np.diff(self.offsets(start, stop))

    def lengths_at(self, pairs: np.ndarray) -> np.ndarray:
        spans = [self.offsets(pair, pair + 1) for pair in pairs.tolist()]
        return np.array([int(b - a) for a, b in spans], np.int64)

    def rows(self, pairs: np.ndarray) -> list[np.ndarray]:
        """The ids of each pair, read."""
        rows, size = [], self.dtype.itemsize
        for pair in pairs.tolist():
            begin, end = self.offsets(pair, pair + 1).tolist()
            data = self._read(self._ids, begin * size, (end - begin) * size)
            rows.append(np.frombuffer(data, self.dtype))
        return rows


class PreparedCorpus:
    """A complete prepared corpus, checked against its manifest, its files open."""

    def __init__(self, directory: Path, manifest: dict) -> None:
        self.directory = Path(directory)
        self.manifest = manifest
        self.pairs: int = manifest["pairs"]
        files = manifest["files"]
        self.sides = {side: Side(self.directory, side, files) for side in SIDES}
        # the piece links of a corpus with alignments (`links`)
        self.alignment = Side(self.directory, ALIGN, files) if f"{ALIGN}.ids" in files else None
        for side in filter(None, [*self.sides.values(), self.alignment]):
            ends = side.offsets(0, 0)[0], side.offsets(side.pairs, side.pairs)[0]
            if side.pairs != self.pairs or ends != (0, side.tokens):
                raise Stale("its offsets do not match its ids")

    def links(self, pairs: np.ndarray) -> list[np.ndarray] | None:
        """The (M, 2) (source piece, target piece) links of each pair; None for a corpus
        without alignments."""
        if self.alignment is None:
            return None
        return [row.reshape(-1, 2) for row in self.alignment.rows(pairs)]

    @property
    def src(self) -> Side:
        return self.sides["src"]

    @property
    def tgt(self) -> Side:
        return self.sides["tgt"]

    @property
    def sources_sha256(self) -> list[str]:
        """The hash of each text file: the sides', then the alignments' if it has them."""
        return [record["sha256"] for record in self.manifest["sources"].values()]

    @classmethod
    def open(
        cls,
        directory: Path,
        tokenizer: str,
        sources: dict[str, Path],
        sample: SegmentationSample | None = None,
    ) -> PreparedCorpus:
        """The corpus prepared in `directory` from the `sources` files (by side) with the
        tokenizer of fingerprint `tokenizer`, in its best segmentation or in `sample`;
        `Stale` says why it cannot be used."""
        directory = Path(directory)
        try:
            manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise Stale("it is incomplete (no manifest)") from None
        except (OSError, ValueError):
            raise Stale("its manifest is unreadable") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise Stale("it was prepared in another format")
        if manifest.get(SEAL) != _seal_of(manifest):
            raise Stale("its manifest was edited after it was written")
        if manifest.get("tokenizer") != tokenizer:
            raise Stale("it was prepared with another tokenizer")
        if manifest.get("sample") != (None if sample is None else sample.record):
            raise Stale("it was segmented otherwise")
        if set(manifest.get("sources", ())) != set(sources):
            raise Stale("it was prepared from other files")
        try:
            refreshed = _check_files(directory, manifest, sources)
        except (KeyError, TypeError, AttributeError):
            raise Stale("its manifest is unreadable") from None
        if refreshed:  # copied (new times, same content): record the times, hash no more
            try:
                write_manifest(directory, manifest)
            except (OSError, UserError):
                pass  # read-only: the next start hashes again, and still finds it right
        try:
            return cls(directory, manifest)
        except (KeyError, TypeError, ValueError, OSError, UserError):
            raise Stale("a file does not match its manifest") from None


def write_manifest(directory: Path, manifest: dict) -> None:
    """Write `manifest` sealed: with the hash of the rest of it (`SEAL`)."""
    sealed = {key: value for key, value in manifest.items() if key != SEAL}
    sealed[SEAL] = _seal_of(sealed)
    atomic_write_text(directory / MANIFEST, json.dumps(sealed, indent=2) + "\n")


def _seal_of(manifest: dict) -> str:
    """The SHA-256 of the manifest's content, its seal aside (keys in order)."""
    content = {key: value for key, value in manifest.items() if key != SEAL}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def _check_files(directory: Path, manifest: dict, sources: dict[str, Path]) -> bool:
    """Raise `Stale` unless every source and written file holds the recorded content;
    update the records whose size and time changed with the content the same. Returns
    whether any record was updated."""
    refreshed = False
    for side, path in sources.items():
        record = manifest["sources"][side]
        if record["path"] != str(path):
            raise Stale(f"it was prepared from {record['path']}, not {path}")
        same, unchanged = same_file(path, record)
        if not same:
            raise Stale(f"{path} changed since it was prepared")
        if not unchanged:
            record.update(file_record(path, record["sha256"]))
            refreshed = True
    for name, entry in manifest["files"].items():
        path = directory / name
        itemsize = np.dtype(entry["dtype"]).itemsize
        same, unchanged = same_file(path, entry)
        if not same or entry["size"] != entry["count"] * itemsize:
            raise Stale(f"{path} was truncated or altered after it was written")
        if not unchanged:
            entry.update(
                {k: v for k, v in file_record(path, entry["sha256"]).items() if k != "path"}
            )
            refreshed = True
    return refreshed
