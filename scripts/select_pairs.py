"""Write the pairs of a parallel corpus whose source line matches a regular expression (or,
with --invert, does not): an in-domain subset to fine-tune on (docs/trained-models.md).

    python scripts/select_pairs.py --corpus data/multi30k/train --src de --tgt en \
        --match '[Hh]und' --out data/dogs/train

reads data/multi30k/train.de[.gz] and .en[.gz] and writes data/dogs/train.de and .en.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from seq2seq.data.sources import corpus_source  # noqa: E402
from seq2seq.errors import UserError  # noqa: E402
from seq2seq.files import atomic_write_text  # noqa: E402


def select_pairs(
    corpus: str, src: str, tgt: str, pattern: str, out: Path, invert: bool = False
) -> int:
    """Write the matching pairs (`invert`: the others) to OUT.SRC and OUT.TGT; returns how
    many there are."""
    try:
        regex = re.compile(pattern)
    except re.error as error:
        raise UserError(f"--match {pattern!r} is not a regular expression: {error}") from None
    source = corpus_source(corpus)
    pairs = source.read((src, tgt))
    kept = [i for i, line in enumerate(pairs.src) if bool(regex.search(line)) != invert]
    if not kept:
        which = "every" if invert else "no"
        raise UserError(f"{which} source line of {source} matches {pattern!r}")
    for lang, lines in ((src, pairs.src), (tgt, pairs.tgt)):
        atomic_write_text(Path(f"{out}.{lang}"), "".join(lines[i] + "\n" for i in kept))
    return len(kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True, help="corpus prefix: PREFIX.SRC, PREFIX.TGT")
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--match", required=True, help="a Python regular expression")
    parser.add_argument("--out", type=Path, required=True, help="output prefix")
    parser.add_argument("--invert", action="store_true", help="the pairs that do not match")
    args = parser.parse_args()
    try:
        count = select_pairs(args.corpus, args.src, args.tgt, args.match, args.out, args.invert)
    except UserError as error:
        sys.exit(f"select_pairs: {error}")
    print(f"{count} pairs -> {args.out}.{args.src}, {args.out}.{args.tgt}", file=sys.stderr)


if __name__ == "__main__":
    main()
