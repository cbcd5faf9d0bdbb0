"""Write lexical constraints drawn from reference translations, a line per reference: its
N longest words (ties: the first), in their order in the line, tab-separated; a simulated
terminology list for `seq2seq translate --constraints` (docs/decoding.md).

    python scripts/reference_constraints.py --ref data/multi30k/test_2016_flickr.en.gz \
        --words 1 --out constraints.txt
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from seq2seq.data.corpus import read_lines  # noqa: E402
from seq2seq.files import atomic_write_text  # noqa: E402

WORD = re.compile(r"\w+")


def longest_words(line: str, count: int) -> list[str]:
    """The `count` longest words of a line (ties: the first), in their order in it."""
    words = WORD.findall(line)
    chosen = sorted(range(len(words)), key=lambda i: (-len(words[i]), i))[:count]
    return [words[i] for i in sorted(chosen)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ref", type=Path, required=True, help="the references, a line each")
    parser.add_argument("--words", type=int, default=1, help="the phrases of a line (words)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    lines = read_lines(args.ref)
    phrases = ["\t".join(longest_words(line, args.words)) for line in lines]
    atomic_write_text(args.out, "".join(line + "\n" for line in phrases))
    print(f"{len(lines)} lines of constraints -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
