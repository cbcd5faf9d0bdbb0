"""Score the cleaning filters on a corpus with known noise (scripts/make_noisy_corpus.py):
which filter dropped the pairs of each label, each filter's precision (the share of what
it dropped that is noise) and each kind of noise's recall (the share of it dropped).

    python scripts/score_cleaning.py --corpus data/noisy/train --src de --tgt en \\
        [--filters recommended]

reads PREFIX.SRC, PREFIX.TGT and PREFIX.labels (`clean` or the kind of noise, a line a
pair) and prints Markdown tables. --filters takes what data.filters takes, as YAML.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from seq2seq.config import DataConfig  # noqa: E402
from seq2seq.data.cleaning import Cleaner, filter_pool, judged_chunks  # noqa: E402
from seq2seq.data.corpus import read_lines  # noqa: E402
from seq2seq.data.corpus_encoder import CHUNK_PAIRS  # noqa: E402
from seq2seq.data.sources import corpus_source  # noqa: E402
from seq2seq.errors import UserError  # noqa: E402

CLEAN = "clean"


def verdicts(prefix: str, src: str, tgt: str, filters: object) -> tuple[list[str], list[str]]:
    """The filter that dropped each pair (`kept` for none), and the filters' names."""
    data = DataConfig(src=src, tgt=tgt, train=prefix, valid=prefix, filters=filters)
    (settings,) = data.corpus_filters
    cleaner = Cleaner(settings, (src, tgt), lambda message: print(message, file=sys.stderr))
    report = cleaner.report(prefix)
    names = ["kept", *cleaner.names[1:]]
    found: list[str] = []
    with filter_pool(settings, (src, tgt)) as pool:
        chunks = corpus_source(prefix).chunks((src, tgt), CHUNK_PAIRS)
        for _, firsts in judged_chunks(chunks, cleaner, report, pool):
            if report.dropped["empty"]:
                raise UserError(f"{prefix} has pairs with an empty side: they have no verdict")
            found += [names[number] for number in firsts]
    return found, names


def tables(labels: list[str], found: list[str], names: list[str]) -> str:
    kinds = sorted(set(labels) - {CLEAN})
    counts = Counter(zip(found, labels, strict=True))
    rows = ["| dropped by | " + " | ".join([CLEAN, *kinds]) + " | precision |"]
    rows.append("|---" * (len(kinds) + 3) + "|")
    for name in names:
        cells = [counts[name, label] for label in [CLEAN, *kinds]]
        noise = sum(cells[1:])
        precision = "" if name == "kept" else f"{noise / max(sum(cells), 1):.1%}"
        rows.append(f"| {name} | " + " | ".join(map(str, cells)) + f" | {precision} |")
    totals = Counter(labels)
    recall = [
        f"{sum(counts[n, kind] for n in names if n != 'kept') / totals[kind]:.1%}" for kind in kinds
    ]
    clean_dropped = 1 - counts["kept", CLEAN] / totals[CLEAN]
    rows.append(f"| recall | {clean_dropped:.1%} dropped | " + " | ".join(recall) + " | |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True, help="PREFIX of PREFIX.SRC, .TGT, .labels")
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--filters", default="recommended", help="as data.filters, in YAML")
    args = parser.parse_args()
    try:
        labels = read_lines(Path(f"{args.corpus}.labels"))
        found, names = verdicts(args.corpus, args.src, args.tgt, yaml.safe_load(args.filters))
        if len(found) != len(labels):
            raise UserError(f"{len(found)} pairs and {len(labels)} labels; give one label a pair")
    except UserError as error:
        sys.exit(f"score_cleaning: {error}")
    print(tables(labels, found, names))


if __name__ == "__main__":
    main()
