"""A training corpus made ready for a run: read, pairs with an empty side dropped, the
tokenizer trained on it (or loaded) and its piece ids computed (or read from the cache).

Runs, and the shared tokenizers of a sweep, prepare their corpus through these two steps.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data.corpus import ParallelCorpus, drop_empty, read_parallel
from seq2seq.data.id_cache import encode_corpus
from seq2seq.data.tokenizer import (
    Tokenizer,
    copy_tokenizer,
    train_tokenizer,
    trained_settings,
)
from seq2seq.errors import UserError


def read_training_pairs(data: DataConfig) -> tuple[ParallelCorpus, int]:
    """The training pairs with both sides non-empty, and how many were dropped."""
    corpus, empty = drop_empty(read_parallel(data.train, data.src, data.tgt))
    if len(corpus) == 0:
        raise UserError(f"{data.train}: every training pair has an empty side; check the corpus")
    return corpus, empty


@dataclass
class TokenizedCorpus:
    tokenizer: Tokenizer
    src_ids: list[list[int]]
    tgt_ids: list[list[int]]
    key: str  # the id cache's hash of the tokenizer and both sides' text


def tokenize_training_pairs(
    cfg: TokenizerConfig,
    corpus: ParallelCorpus,
    directory: Path,
    seed: int,
    log: logging.Logger | None = None,
) -> TokenizedCorpus:
    """The tokenizer in `directory` and the piece ids of the corpus's two sides. The
    tokenizer is made there first (trained on `corpus`, or copied from `cfg.model`) if there
    is none, or if the one there was made with another tokenizer config (left by a start
    that failed)."""
    recorded = trained_settings(directory) if directory.is_dir() else None
    reusable = directory.is_dir() and recorded in (None, cfg.model_dump())
    if reusable:
        tokenizer = Tokenizer.load(directory)
    else:
        if log and directory.is_dir():
            log.warning("%s was made with other settings (%s); replacing it", directory, recorded)
        if cfg.model is not None:
            tokenizer = copy_tokenizer(cfg, directory)
            if log:
                log.info("tokenizer: %s, copied to %s", cfg.model, directory)
        else:
            if log:
                log.info(
                    "training a %s SentencePiece model (%d pieces)", cfg.model_type, cfg.vocab_size
                )
            tokenizer = train_tokenizer(cfg, corpus.src, corpus.tgt, directory, seed)
    src_ids, tgt_ids, key = encode_corpus(tokenizer, directory, corpus.src, corpus.tgt, log)
    return TokenizedCorpus(tokenizer, src_ids, tgt_ids, key)
