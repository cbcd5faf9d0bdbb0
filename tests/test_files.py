"""Atomic writes: a reader sees the old file or the new one, and a failed write leaves
nothing behind."""

import os
import subprocess
import sys

import pytest

from seq2seq.errors import ResourceError, UserError
from seq2seq.files import atomic_write, atomic_write_bytes, atomic_write_text, publish_directory


def test_a_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "deep/dir/out.txt"
    atomic_write_text(target, "old\n")
    atomic_write_text(target, "new\n")
    assert target.read_text() == "new\n"
    assert [p.name for p in target.parent.iterdir()] == ["out.txt"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path):
    target = tmp_path / "out.txt"
    atomic_write_text(target, "old\n")

    def fail_halfway(handle):
        handle.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(ResourceError, match="cannot write .*out.txt: No space left on device"):
        atomic_write(target, fail_halfway)
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_publish_directory_keeps_the_first_and_replaces_on_request(tmp_path):
    target = tmp_path / "tok"

    def fill(text):
        def make(path):
            path.mkdir()
            (path / "model").write_text(text)

        return make

    publish_directory(target, fill("first"))
    publish_directory(target, fill("second"))  # one is there: keep it
    assert (target / "model").read_text() == "first"
    publish_directory(target, fill("third"), replace=True)
    assert (target / "model").read_text() == "third"
    assert [p.name for p in tmp_path.iterdir()] == ["tok"]


def test_a_failed_fill_leaves_no_directory(tmp_path):
    def broken(path):
        path.mkdir()
        raise RuntimeError("tokenizer training failed")

    with pytest.raises(RuntimeError):
        publish_directory(tmp_path / "tok", broken)
    assert list(tmp_path.iterdir()) == []


def test_writing_over_a_directory_names_it(tmp_path):
    with pytest.raises(UserError, match="it is a directory; give a file name"):
        atomic_write_text(tmp_path, "text")
    assert list(tmp_path.parent.glob(f".{tmp_path.name}.*.tmp")) == []


def dead_pid() -> int:
    """The pid of a process that has ended."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


def test_a_write_removes_what_killed_writes_of_its_target_left_and_nothing_else(tmp_path):
    target = tmp_path / "last.pt"
    orphan = tmp_path / f".last.pt.{dead_pid()}-0a1b2c3d.tmp"
    in_flight = tmp_path / f".last.pt.{os.getpid()}-0a1b2c3d.tmp"  # a live writer's
    other_target = tmp_path / f".best.pt.{dead_pid()}-0a1b2c3d.tmp"
    for path in (orphan, in_flight, other_target):
        path.write_bytes(b"half a checkpoint")
    atomic_write_bytes(target, b"whole")
    assert target.read_bytes() == b"whole" and not orphan.exists()
    assert in_flight.exists() and other_target.exists()
