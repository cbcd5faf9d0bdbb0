"""Write data/sample/: one small corpus (the toy language of `make_toy_data.py`, seed 5)
in every format a corpus may take, for the README's "Train on your own data" and the
tests: the training pairs as a prefix (`train.src`, `train.tgt`), as TSV (`train.tsv`) and
as JSON lines (`train.jsonl`), the validation pairs as JSON lines in Hugging Face's
`translation` form (`valid.jsonl`), and the test pairs as TSV (`test.tsv`) and parquet
(`test.parquet`, a Hugging Face dataset file: needs pyarrow, which the `hf` extra brings).

    python scripts/make_sample_corpora.py [--out data/sample]

The same text every time (parquet: the same table; its bytes name the pyarrow that wrote
them); tests/test_corpus_formats.py checks that the committed files hold what this writes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from seq2seq.data.corpus import read_lines  # noqa: E402
from seq2seq.data.toy import make_toy_corpus  # noqa: E402
from seq2seq.files import atomic_write_text  # noqa: E402

SIZES = {"train": 300, "valid": 30, "test": 30}
LANGS = ("src", "tgt")


def toy_pairs() -> dict[str, list[tuple[str, str]]]:
    """The pairs of each split of the toy corpus the sample holds."""
    with tempfile.TemporaryDirectory() as tmp:
        make_toy_corpus(Path(tmp), seed=5, max_words=8, **SIZES)
        sides = {
            split: [read_lines(Path(tmp) / f"{split}.{lang}") for lang in LANGS] for split in SIZES
        }
    return {split: list(zip(*texts, strict=True)) for split, texts in sides.items()}


def lines(rows: list[str]) -> str:
    return "".join(row + "\n" for row in rows)


def write_sample(out: Path) -> list[Path]:
    """Write every file of the sample into `out`; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    pairs = toy_pairs()
    texts = {
        "train.tsv": lines([f"{s}\t{t}" for s, t in pairs["train"]]),
        "train.jsonl": lines(
            [json.dumps(dict(zip(LANGS, p, strict=True))) for p in pairs["train"]]
        ),
        "valid.jsonl": lines(
            [json.dumps({"translation": dict(zip(LANGS, p, strict=True))}) for p in pairs["valid"]]
        ),
        "test.tsv": lines([f"{s}\t{t}" for s, t in pairs["test"]]),
    }
    texts |= {
        f"train.{lang}": lines([p[i] for p in pairs["train"]]) for i, lang in enumerate(LANGS)
    }
    for name, text in texts.items():
        atomic_write_text(out / name, text)
    written = [out / name for name in texts]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        print("no pyarrow: test.parquet not written (pip install 'seq2seq[hf]')", file=sys.stderr)
        return written
    columns = {lang: [p[i] for p in pairs["test"]] for i, lang in enumerate(LANGS)}
    partial = out / ".test.parquet.partial"
    pq.write_table(pa.table(columns), partial, compression="none")
    os.replace(partial, out / "test.parquet")
    return [*written, out / "test.parquet"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("data/sample"))
    args = parser.parse_args()
    for path in write_sample(args.out):
        print(path)


if __name__ == "__main__":
    main()
