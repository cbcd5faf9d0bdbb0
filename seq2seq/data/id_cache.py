"""Piece ids of a tokenized corpus, cached in the tokenizer directory that made them.

Tokenizing a large corpus takes minutes. A resumed run, a run started from another run's
tokenizer and every run of a sweep find the ids here instead. A cache file is named by a
hash of the tokenizer models and of both sides' text, so a changed corpus or tokenizer
misses the cache and is tokenized afresh; nothing has to be invalidated by hand.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import torch

from seq2seq.data.tokenizer import Tokenizer
from seq2seq.files import atomic_write

CACHE_DIR = "ids"
_FORMAT = 1


def corpus_key(tokenizer_dir: Path, src: list[str], tgt: list[str]) -> str:
    """Hex digest of the tokenizer's model files and the two sides' lines."""
    digest = hashlib.sha256(f"format {_FORMAT}\n".encode())
    for model in sorted(Path(tokenizer_dir).glob("*.model")):
        digest.update(model.name.encode() + b"\0" + model.read_bytes())
    for side in (src, tgt):
        digest.update(f"\0{len(side)}\0".encode())
        for line in side:
            digest.update(line.encode("utf-8") + b"\n")
    return digest.hexdigest()[:32]


def _pack(rows: list[list[int]]) -> dict[str, torch.Tensor]:
    return {
        "lengths": torch.tensor([len(r) for r in rows], dtype=torch.int32),
        "ids": torch.tensor([i for r in rows for i in r], dtype=torch.int32),
    }


def _unpack(packed: dict[str, torch.Tensor]) -> list[list[int]]:
    flat, rows, start = packed["ids"].tolist(), [], 0
    for length in packed["lengths"].tolist():
        rows.append(flat[start : start + length])
        start += length
    if start != len(flat):
        raise ValueError("lengths do not add up to the ids")
    return rows


def encode_corpus(
    tokenizer: Tokenizer,
    tokenizer_dir: Path,
    src: list[str],
    tgt: list[str],
    log: logging.Logger | None = None,
) -> tuple[list[list[int]], list[list[int]], str]:
    """Source and target piece ids of a parallel corpus, from the cache when it has them,
    and the corpus's key (see `corpus_key`)."""
    key = corpus_key(tokenizer_dir, src, tgt)
    path = Path(tokenizer_dir) / CACHE_DIR / f"{key}.pt"
    if path.is_file():
        try:
            cached = torch.load(path, map_location="cpu", weights_only=True)
            src_ids, tgt_ids = _unpack(cached["src"]), _unpack(cached["tgt"])
            if len(src_ids) == len(src) and len(tgt_ids) == len(tgt):
                if log:
                    log.info("piece ids of %d pairs read from %s", len(src), path)
                return src_ids, tgt_ids, key
        except Exception:  # noqa: BLE001 - any damage means: tokenize again and rewrite
            pass
        if log:
            log.warning("%s is damaged; tokenizing the corpus again", path)
    src_ids, tgt_ids = tokenizer.encode_src(src), tokenizer.encode_tgt(tgt)
    payload = {"src": _pack(src_ids), "tgt": _pack(tgt_ids)}
    atomic_write(path, lambda handle: torch.save(payload, handle))
    return src_ids, tgt_ids, key
