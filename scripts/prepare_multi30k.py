"""Fetch the Multi30k task-1 raw files (train, val and three test sets: test_2016_flickr,
test_2017_flickr and test_2017_mscoco, the last out of domain; de, en, fr; and cs, which
the release has for train, val and test_2016_flickr).

By default they are downloaded from the official release; `--from DIR` copies them from
a local copy holding the same `{split}.{lang}.gz` names (the Czech ones where it has them).
The corpus is never committed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import BinaryIO

from seq2seq.data.corpus import read_lines
from seq2seq.errors import UserError

URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}"
SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")
LANGS = ("de", "en", "fr")
CZECH_SPLITS = ("train", "val", "test_2016_flickr")  # the release has no Czech test_2017
TIMEOUT_S = 60


def file_names() -> list[str]:
    """The files every copy holds."""
    return [f"{split}.{lang}.gz" for split in SPLITS for lang in LANGS]


def czech_names() -> list[str]:
    """The Czech files: downloaded; copied where a local copy holds them."""
    return [f"{split}.cs.gz" for split in CZECH_SPLITS]


def _atomic_copy(source: BinaryIO, destination: Path) -> None:
    """Stream a binary file object into `destination` via a temporary file and rename.
    The file gets the mode a new file gets (0666 less the umask), not mkstemp's 0600."""
    fd, tmp = tempfile.mkstemp(prefix=f".{destination.name}.", dir=destination.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            shutil.copyfileobj(source, handle)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, destination)
    except BaseException:
        os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask


def download(out: Path) -> None:
    for name in file_names() + czech_names():
        url = URL.format(name=name)
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
                _atomic_copy(response, out / name)
        except (urllib.error.URLError, OSError) as error:
            # URLError covers HTTP errors and no network; OSError covers timeouts mid-read.
            reason = getattr(error, "reason", None) or error
            raise UserError(
                f"cannot download {url} ({reason}); when offline, use --from DIR "
                "with a local copy of the .gz files"
            ) from None


def copy_from(source_dir: Path, out: Path) -> None:
    if not source_dir.is_dir():
        raise UserError(f"--from {source_dir}: no such directory; pass the local Multi30k copy")
    missing = [name for name in file_names() if not (source_dir / name).is_file()]
    if missing:
        raise UserError(
            f"{source_dir} lacks {', '.join(missing)}; pass a directory with all Multi30k "
            "task-1 .gz files to --from"
        )
    for name in file_names() + [n for n in czech_names() if (source_dir / n).is_file()]:
        with open(source_dir / name, "rb") as handle:
            _atomic_copy(handle, out / name)


def check_counts(out: Path) -> dict[str, int]:
    """Lines per split, checked equal across languages."""
    counts: dict[str, int] = {}
    for split in SPLITS:
        langs = [*LANGS, *(["cs"] if (out / f"{split}.cs.gz").is_file() else [])]
        per_lang = {lang: len(read_lines(out / f"{split}.{lang}.gz")) for lang in langs}
        if len(set(per_lang.values())) != 1:
            found = ", ".join(f"{lang} {n}" for lang, n in per_lang.items())
            raise UserError(
                f"{split} line counts differ across languages in {out} ({found}); "
                "re-fetch the files"
            )
        counts[split] = per_lang[LANGS[0]]
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("data/multi30k"), help="destination")
    parser.add_argument(
        "--from", dest="source", type=Path, help="copy from this local directory, no download"
    )
    args = parser.parse_args(argv)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        if args.source is None:
            download(args.out)
        else:
            copy_from(args.source, args.out)
        counts = check_counts(args.out)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    summary = ", ".join(f"{split}: {n} lines" for split, n in counts.items())
    czech = sum((args.out / name).is_file() for name in czech_names())
    langs = "/".join(LANGS) + (f", cs in {czech} of them" if czech else "")
    print(f"Multi30k in {args.out} ({langs}): {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
