from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest

from seq2seq.data.corpus import corpus_path, read_lines, read_pairs
from seq2seq.data.sources import read_corpus
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
        read_corpus(str(tmp_path / "c"), "de", "en")
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


def test_read_corpus_reads_aligned_pairs(tmp_path: Path) -> None:
    write(tmp_path / "p.de.gz", b"eins\nzwei\n")
    write(tmp_path / "p.en", b"one\r\ntwo")
    corpus = read_corpus(str(tmp_path / "p"), "de", "en")
    assert corpus.src == ["eins", "zwei"]
    assert corpus.tgt == ["one", "two"]
    files = corpus.source.files(("de", "en"))
    assert files == {"src": tmp_path / "p.de.gz", "tgt": tmp_path / "p.en"}
    assert len(corpus) == 2


def test_empty_corpus_names_the_files(tmp_path: Path) -> None:
    write(tmp_path / "e.de", b"")
    write(tmp_path / "e.en", b"")
    with pytest.raises(UserError) as info:
        read_corpus(str(tmp_path / "e"), "de", "en")
    assert str(tmp_path / "e.de") in str(info.value)
    assert str(tmp_path / "e.en") in str(info.value)


def pairs(tmp_path: Path, src: bytes, tgt: bytes, chunk: int, suffix: str = "") -> list:
    write(tmp_path / f"x.de{suffix}", src)
    write(tmp_path / f"x.en{suffix}", tgt)
    return list(read_pairs(tmp_path / f"x.de{suffix}", tmp_path / f"x.en{suffix}", chunk))


def test_read_pairs_drops_pairs_with_an_empty_side_in_every_chunk(tmp_path: Path) -> None:
    src = b"a\n\nc\n \t\ne\nf\n"
    tgt = b"A\nB\n  \nD\nE\n\n"
    for chunk in (1, 2, 4, 100):
        found = pairs(tmp_path, src, tgt, chunk)
        assert [s for c in found for s in c.src] == ["a", "e"]
        assert [t for c in found for t in c.tgt] == ["A", "E"]
        assert sum(c.empty for c in found) == 4


def test_read_pairs_checks_what_read_corpus_checks(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"x.de has 5 lines, .*x.en has 4; the files must"):
        pairs(tmp_path, b"1\n2\n3\n4\n5\n", b"1\n2\n3\n4\n", chunk=2)
    with pytest.raises(UserError, match=r"x.en, line 4: invalid UTF-8; re-encode"):
        pairs(tmp_path, b"1\n2\n3\n4\n", b"1\n2\n3\n\xff\n", chunk=2)  # a later chunk
    with pytest.raises(UserError, match="empty corpus"):
        pairs(tmp_path, b"", b"", chunk=2)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_read_pairs_hashes_each_file_as_stored(tmp_path: Path, suffix: str) -> None:
    write(tmp_path / f"x.de{suffix}", RAW)
    write(tmp_path / f"x.en{suffix}", RAW)
    digests = (hashlib.sha256(), hashlib.sha256())
    found = list(read_pairs(tmp_path / f"x.de{suffix}", tmp_path / f"x.en{suffix}", 2, digests))
    assert [s for c in found for s in c.src] == [line for line in EXPECTED if line.strip()]
    stored = (tmp_path / f"x.de{suffix}").read_bytes()
    assert digests[0].hexdigest() == hashlib.sha256(stored).hexdigest()
