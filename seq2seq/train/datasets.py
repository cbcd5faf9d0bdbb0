"""Training and validation data of a run: read, tokenize (training the tokenizer and
tokenizing the corpus once), filter."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from seq2seq.checkpoint import RunDir
from seq2seq.config import Config
from seq2seq.data.batching import TrainBatches
from seq2seq.data.corpus import corpus_path, read_parallel
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.data.training_corpus import read_training_pairs, tokenize_training_pairs
from seq2seq.errors import UserError


@dataclass
class Datasets:
    tokenizer: Tokenizer
    train: TrainBatches
    valid_src: list[str]
    valid_ref: list[str]
    length_ratio: float  # source pieces per target piece over the kept training pairs
    corpus_key: str  # the training corpus's identity (see data.id_cache.corpus_key)


def load_datasets(cfg: Config, run: RunDir, log: logging.Logger) -> Datasets:
    data = cfg.data
    # Check every file up front: a missing test set must not surface after hours of training.
    for prefix in data.test:
        corpus_path(prefix, data.src), corpus_path(prefix, data.tgt)
    valid = read_parallel(data.valid, data.src, data.tgt)
    train, empty = read_training_pairs(data)
    tokenized = tokenize_training_pairs(cfg.tokenizer, train, run.tokenizer, cfg.seed, log)
    tokenizer, src_ids, tgt_ids = tokenized.tokenizer, tokenized.src_ids, tokenized.tgt_ids
    keep = [
        i
        for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True))
        if len(s) <= data.max_len and len(t) <= data.max_len
    ]
    too_long = len(src_ids) - len(keep)
    if not keep:
        raise UserError(
            f"no training pair is at most {data.max_len} pieces long; raise data.max_len"
        )
    log.info(
        "train: %d pairs kept (%d with an empty side dropped, %d longer than %d pieces dropped); "
        "valid: %d pairs; vocabulary: %d source, %d target",
        len(keep),
        empty,
        too_long,
        data.max_len,
        len(valid),
        tokenizer.src_vocab_size,
        tokenizer.tgt_vocab_size,
    )
    src_ids, tgt_ids = [src_ids[i] for i in keep], [tgt_ids[i] for i in keep]
    ratio = sum(map(len, src_ids)) / max(sum(map(len, tgt_ids)), 1)
    batches = TrainBatches(src_ids, tgt_ids, cfg.train.batch_tokens, cfg.seed)
    return Datasets(tokenizer, batches, valid.src, valid.tgt, ratio, tokenized.key)
