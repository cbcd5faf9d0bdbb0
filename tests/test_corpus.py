from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from seq2seq.data.corpus import (
    ParallelCorpus,
    corpus_path,
    drop_empty,
    read_lines,
    read_parallel,
)
from seq2seq.errors import UserError

# Mixed line endings, inner whitespace, a non-ASCII line separator inside a line, and no
# final newline: only "\n" and "\r\n" may end a line.
RAW = "Ein Hund.\r\n  zwei  Leerzeichen \t\nmit\u2028Trenner\n\nüber Straße".encode()
EXPECTED = ["Ein Hund.", "  zwei  Leerzeichen \t", "mit\u2028Trenner", "", "über Straße"]


def write(path: Path, data: bytes) -> Path:
    if path.suffix == ".gz":
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def test_plain_and_gzip_give_identical_lines(tmp_path: Path) -> None:
    plain = read_lines(write(tmp_path / "a.de", RAW))
    packed = read_lines(write(tmp_path / "b.de.gz", RAW))
    assert plain == packed == EXPECTED


def test_corpus_path_prefers_plain_then_gzip(tmp_path: Path) -> None:
    prefix = str(tmp_path / "train")
    write(tmp_path / "train.en.gz", b"x\n")
    assert corpus_path(prefix, "en") == tmp_path / "train.en.gz"
    write(tmp_path / "train.en", b"x\n")
    assert corpus_path(prefix, "en") == tmp_path / "train.en"


def test_missing_corpus_names_both_tried_paths(tmp_path: Path) -> None:
    with pytest.raises(UserError) as info:
        corpus_path(str(tmp_path / "train"), "de")
    message = str(info.value)
    assert str(tmp_path / "train.de") in message
    assert str(tmp_path / "train.de.gz") in message
    assert "\n" not in message


def test_line_count_mismatch_names_files_and_counts(tmp_path: Path) -> None:
    write(tmp_path / "c.de", b"a\nb\nc\n")
    write(tmp_path / "c.en.gz", b"a\nb\n")
    with pytest.raises(UserError) as info:
        read_parallel(str(tmp_path / "c"), "de", "en")
    message = str(info.value)
    for part in (str(tmp_path / "c.de"), str(tmp_path / "c.en.gz"), "3", "2"):
        assert part in message


@pytest.mark.parametrize("name", ["bad.de", "bad.de.gz"])
def test_invalid_utf8_names_file_and_line(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / name, b"fine\nalso fine\nbroken \xff byte\nlater\n")
    with pytest.raises(UserError) as info:
        read_lines(path)
    assert str(path) in str(info.value)
    assert "line 3" in str(info.value)


def test_corrupt_gzip_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "x.de.gz"
    path.write_bytes(b"not gzip at all\n")
    with pytest.raises(UserError, match="gzip"):
        read_lines(path)


def test_read_parallel_reads_aligned_pairs(tmp_path: Path) -> None:
    write(tmp_path / "p.de.gz", b"eins\nzwei\n")
    write(tmp_path / "p.en", b"one\r\ntwo")
    corpus = read_parallel(str(tmp_path / "p"), "de", "en")
    assert corpus.src == ["eins", "zwei"]
    assert corpus.tgt == ["one", "two"]
    assert (corpus.src_path, corpus.tgt_path) == (tmp_path / "p.de.gz", tmp_path / "p.en")
    assert len(corpus) == 2


def test_empty_corpus_names_the_files(tmp_path: Path) -> None:
    write(tmp_path / "e.de", b"")
    write(tmp_path / "e.en", b"")
    with pytest.raises(UserError) as info:
        read_parallel(str(tmp_path / "e"), "de", "en")
    assert str(tmp_path / "e.de") in str(info.value)
    assert str(tmp_path / "e.en") in str(info.value)


def test_drop_empty_removes_pairs_with_an_empty_side() -> None:
    corpus = ParallelCorpus(
        src=["a", "", "c", " \t", "e", "f"],
        tgt=["A", "B", "  ", "D", "E", ""],
        src_path=Path("x.de"),
        tgt_path=Path("x.en"),
    )
    kept, dropped = drop_empty(corpus)
    assert dropped == 4
    assert (kept.src, kept.tgt) == (["a", "e"], ["A", "E"])
    assert kept.src_path == Path("x.de")
    assert len(corpus) == 6  # the input is left untouched
