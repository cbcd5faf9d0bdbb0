"""Files and directories written so that no reader ever sees half of one.

A file is written under a temporary name beside its target, flushed to disk and renamed
over it (a rename within one file system is atomic): a reader sees the old file or the new
one. A directory is filled at a temporary path and renamed into place. A write that fails
removes its temporary file or directory, and the target is left as it was.

Temporary names are unique per write, so processes writing the same target at once (the
shards of a sweep) never write into each other's file. They name the writing process, so
that a write removes the temporaries of the same target that a killed process left (a
resume checkpoint's can weigh 90 MB), and never those of a process still writing.
"""

from __future__ import annotations

import errno
import glob
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from seq2seq.errors import ResourceError, UserError

_FULL = {errno.ENOSPC, errno.EDQUOT}


def write_problem(path: Path, error: OSError) -> UserError:
    """One line for a path that could not be written: what happened and what to do."""
    reason = error.strerror or str(error)
    if error.errno in _FULL:
        return ResourceError(
            f"cannot write {path}: {reason}; free some space and run the same command again"
        )
    if error.errno == errno.EISDIR or Path(path).is_dir():
        return UserError(f"cannot write {path}: it is a directory; give a file name")
    blocking = next((p for p in Path(path).parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        return UserError(
            f"cannot write {path}: {blocking} is a file, not a directory; pass a path under "
            "a directory"
        )
    return UserError(f"cannot write {path}: {reason}; pass a path you can write to")


def atomic_write(path: Path, write: Callable[[BinaryIO], Any]) -> None:
    """Call `write` on a temporary file, fsync it and rename it to `path`. A file-system
    error (disk full, read-only, a directory in the way) is a one-line `UserError`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_orphans(path)
        with open(tmp, "xb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise write_problem(path, error) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_orphans(path: Path) -> None:
    """Remove the temporaries of `path` whose writer is no longer running (killed)."""
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*-*.tmp"):
        pid = tmp.name[len(path.name) + 2 :].split("-", 1)[0]
        if pid.isdigit() and not _running(int(pid)):
            tmp.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda handle: handle.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def publish_directory(
    target: Path, fill: Callable[[Path], object], replace: bool = False, new: bool = False
) -> None:
    """Have `fill` make a directory at a temporary path, then rename it to `target`.

    If another process puts a directory there first, theirs is kept: it was made from the
    same input (a shared tokenizer) or is as fresh (a report). `replace` replaces one that
    was there before. `new`: the target is the caller's own (an export's output), so one
    that appeared meanwhile is a `UserError` and this one's work is dropped.
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as error:
        raise write_problem(target, error) from None
    try:
        fill(staging / target.name)
        if replace:
            try:
                os.rename(target, staging / "old")  # rename() cannot replace a full directory
            except FileNotFoundError:
                pass
        try:
            os.rename(staging / target.name, target)
        except OSError:
            if not target.is_dir():
                raise
            if new:
                raise UserError(
                    f"{target} appeared while this one was written (another command writing "
                    "the same directory?) and is kept; pass a new directory"
                ) from None
    except OSError as error:
        raise write_problem(target, error) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
