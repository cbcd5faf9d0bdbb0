"""Prepared corpora made straight from lists of ids, for tests of what reads them."""

from __future__ import annotations

import json
import random
from pathlib import Path

from seq2seq.data.epoch_batches import TrainingPairs
from seq2seq.data.prepared_corpus import MANIFEST, CorpusWriter, PreparedCorpus


def write_prepared(
    directory: Path, src: list[list[int]], tgt: list[list[int]], vocab_size: int = 100
) -> PreparedCorpus:
    """A prepared corpus of these ids (two chunks, as preparation writes many)."""
    directory.mkdir(parents=True)
    writer = CorpusWriter(directory, vocab_size)
    half = len(src) // 2
    writer.add(src[:half], tgt[:half])
    writer.add(src[half:], tgt[half:])
    writer.finish({"tokenizer": "test", "sources": {}, "empty": 0})
    return PreparedCorpus(directory, json.loads((directory / MANIFEST).read_text()))


def pairs_of(directory: Path, src: list[list[int]], tgt: list[list[int]]) -> TrainingPairs:
    return TrainingPairs([write_prepared(directory, src, tgt)])


def fake_ids(lengths: list[int], seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randint(4, 99) for _ in range(n)] for n in lengths]


def varied_lengths(n: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """Source lengths 1..60 and target lengths loosely correlated with them, like real data."""
    rng = random.Random(seed)
    src = [rng.randint(1, 60) for _ in range(n)]
    tgt = [max(1, round(s * rng.uniform(0.7, 1.4))) for s in src]
    return src, tgt
