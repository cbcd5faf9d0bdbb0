"""Write the built-in toy translation corpus (see seq2seq/data/toy.py for the task)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from seq2seq.data.toy import make_toy_corpus
from seq2seq.errors import UserError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("data/toy"), help="output directory")
    parser.add_argument("--seed", type=int, default=1, help="chooses the sentences")
    parser.add_argument("--train", type=int, default=20000, help="training sentences")
    parser.add_argument("--valid", type=int, default=300, help="validation sentences")
    parser.add_argument("--test", type=int, default=300, help="test sentences")
    parser.add_argument("--max-words", type=int, default=16, help="longest sentence, in words")
    args = parser.parse_args(argv)
    try:
        make_toy_corpus(args.out, args.seed, args.train, args.valid, args.test, args.max_words)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(
        f"wrote {args.out}/{{train,valid,test}}.{{src,tgt,align}}: train {args.train}, "
        f"valid {args.valid}, test {args.test} sentences of 3-{args.max_words} words "
        f"(seed {args.seed})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
