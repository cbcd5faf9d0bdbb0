from __future__ import annotations

import gzip
import io
import os
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pytest

LINES = {"train": 5, "val": 3, "test_2016_flickr": 2, "test_2017_flickr": 4, "test_2017_mscoco": 1}


@pytest.fixture
def script(load_script):
    return load_script("prepare_multi30k")


@pytest.fixture
def local_copy(tmp_path: Path) -> Path:
    source = tmp_path / "shared"
    source.mkdir()
    for split, n in LINES.items():
        for lang in ("de", "en", "fr"):
            text = "".join(f"{split} {lang} {i}\n" for i in range(n))
            (source / f"{split}.{lang}.gz").write_bytes(gzip.compress(text.encode()))
    return source


def test_from_local_copy_copies_and_summarises(script, local_copy, tmp_path, capsys) -> None:
    out = tmp_path / "data" / "multi30k"
    assert script.main(["--from", str(local_copy), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(script.file_names())
    for name in script.file_names():
        assert (out / name).read_bytes() == (local_copy / name).read_bytes()
    printed = capsys.readouterr().out
    assert "train: 5 lines" in printed
    assert "val: 3 lines" in printed
    assert "test_2016_flickr: 2 lines" in printed
    assert "test_2017_flickr: 4 lines" in printed and "test_2017_mscoco: 1 lines" in printed


def test_files_are_readable_as_the_umask_allows(script, local_copy, tmp_path) -> None:
    out = tmp_path / "out"
    old = os.umask(0o022)
    try:
        assert script.main(["--from", str(local_copy), "--out", str(out)]) == 0
        modes = {stat.S_IMODE((out / name).stat().st_mode) for name in script.file_names()}
        assert modes == {0o644}  # not mkstemp's 0600: readable by the group and others
        os.umask(0o077)
        assert script.main(["--from", str(local_copy), "--out", str(out)]) == 0
        assert stat.S_IMODE((out / "train.de.gz").stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_missing_local_file_is_a_one_line_error(script, local_copy, tmp_path, capsys) -> None:
    (local_copy / "val.fr.gz").unlink()
    assert script.main(["--from", str(local_copy), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "val.fr.gz" in err
    assert err.count("\n") == 1


def test_line_count_mismatch_is_reported(script, local_copy, tmp_path, capsys) -> None:
    (local_copy / "train.en.gz").write_bytes(gzip.compress(b"only one line\n"))
    assert script.main(["--from", str(local_copy), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "train" in err and "en 1" in err and "de 5" in err


def test_offline_download_says_use_from(script, tmp_path, capsys, monkeypatch) -> None:
    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    out = tmp_path / "out"
    assert script.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--from DIR" in err
    assert "no network" in err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert list(out.iterdir()) == []  # nothing half-written


def test_download_fetches_every_file_from_the_release(
    script, local_copy, tmp_path, monkeypatch
) -> None:
    requested = []

    def fake_urlopen(url: str, timeout: float) -> io.BytesIO:
        requested.append(url)
        assert timeout > 0
        return io.BytesIO((local_copy / url.rsplit("/", 1)[1]).read_bytes())

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    write_czech(local_copy, script)
    out = tmp_path / "out"
    assert script.main(["--out", str(out)]) == 0
    base = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
    assert requested == [base + name for name in script.file_names() + script.czech_names()]
    assert (out / "train.de.gz").read_bytes() == (local_copy / "train.de.gz").read_bytes()


def test_the_czech_files_are_copied_where_the_local_copy_has_them(script, local_copy, tmp_path):
    out = tmp_path / "out"
    assert script.main(["--from", str(local_copy), "--out", str(out)]) == 0
    assert not list(out.glob("*.cs.gz"))  # a copy without them: the rest as before
    write_czech(local_copy, script)
    assert script.main(["--from", str(local_copy), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.glob("*.cs.gz")) == sorted(script.czech_names())
    (local_copy / "val.cs.gz").write_bytes(gzip.compress(b"one line\n"))  # 1, not 3
    assert script.main(["--from", str(local_copy), "--out", str(out)]) == 2


def write_czech(local_copy: Path, script) -> None:
    for split in script.CZECH_SPLITS:
        text = "".join(f"{split} cs {i}\n" for i in range(LINES[split]))
        (local_copy / f"{split}.cs.gz").write_bytes(gzip.compress(text.encode()))
