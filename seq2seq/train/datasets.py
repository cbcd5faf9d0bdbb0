"""Training and validation data of a run: the tokenizer and the prepared training corpora
(made once, then read by every process), filtered by length; the validation text."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from seq2seq.checkpoint import RunDir
from seq2seq.config import Config, CorpusSpec, DataConfig, pair_name
from seq2seq.data.alignments import read_gold_alignments
from seq2seq.data.epoch_batches import CorpusWeights, TrainBatches, TrainingPairs
from seq2seq.data.prepared_corpus import ALIGN
from seq2seq.data.sources import corpus_source, read_corpus
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.data.training_data import TrainingData, prepare_training_data
from seq2seq.errors import UserError


@dataclass
class ValidationSet:
    """A data.valid corpus, as validation reads it."""

    name: str  # its pair (fr-en) where data.valid has several corpora; else ""
    src: list[str]
    ref: list[str]
    tgt_lang: str | None  # the decode.tgt_lang that translates it
    alignments: list[str] | None = None  # gold Pharaoh lines, where data.valid_alignments


@dataclass
class Datasets:
    tokenizer: Tokenizer
    train: TrainBatches
    valid: list[ValidationSet]  # one per data.valid corpus, in its order
    length_ratio: float  # source pieces per target piece over the kept training pairs
    corpus_key: str  # the training data's identity (see data.training_data.TrainingData)


def load_datasets(cfg: Config, run: RunDir, log: logging.Logger) -> Datasets:
    data = cfg.data
    # Check every file up front: a missing test set must not surface after hours of training.
    for corpus in data.test:
        corpus_source(corpus).files(data.pair(corpus))
    valid = [_validation_set(data, corpus) for corpus in data.valid_corpora]
    prepared = prepare_training_data(data, cfg.tokenizer, run.tokenizer, cfg.seed, log)
    pairs = TrainingPairs(prepared.corpora, prepared.tags)
    samples = [TrainingPairs(corpora, prepared.tags) for corpora in prepared.samples]
    batches = TrainBatches(
        pairs,
        data.max_len,
        cfg.train.batch_tokens,
        cfg.seed,
        CorpusWeights(data.weights, data.temperature),
        samples,
        data.max_len_ratio,
    )
    if not len(batches):
        also, fix = "", "raise data.max_len"
        if data.max_len_ratio is not None:
            also, fix = f" and within data.max_len_ratio {data.max_len_ratio:g}", fix + " or it"
        raise UserError(f"no training pair is at most {data.max_len} pieces long{also}; {fix}")
    tokenizer = prepared.tokenizer
    _say_what_is_kept(log, data, prepared, batches, sum(len(v.src) for v in valid))
    return Datasets(tokenizer, batches, valid, batches.length_ratio, prepared.key)


def _validation_set(data: DataConfig, corpus: CorpusSpec) -> ValidationSet:
    """A data.valid corpus read whole, with its gold alignments where they are scored."""
    pair = data.pair(corpus)
    valid = read_corpus(corpus, *pair)
    gold = None
    if data.valid_alignments:
        aligned = valid.source.files(pair, aligned=True)
        gold = read_gold_alignments(aligned[ALIGN], valid.src, valid.tgt)
    name = pair_name(pair) if len(data.valid_corpora) > 1 else ""
    return ValidationSet(name, valid.src, valid.tgt, data.tgt_lang(corpus), gold)


def _say_what_is_kept(
    log: logging.Logger, data: DataConfig, prepared: TrainingData, batches: TrainBatches, valid: int
) -> None:
    """The log's line on the training pairs kept and dropped, and the vocabularies."""
    dropped = f"{batches.too_long} longer than {data.max_len} pieces dropped"
    if data.max_len_ratio is not None:
        dropped += f", {batches.uneven} with a length ratio over {data.max_len_ratio:g} dropped"
    mixing = {"data.weights": data.weights, "data.temperature": data.temperature}
    by = " and ".join(name for name, value in mixing.items() if value is not None)
    mixed = "" if batches.mixture is None else f", {batches.epoch_pairs} an epoch by {by}"
    if batches.samples:
        mixed += f", in {len(batches.samples)} sampled segmentations, one an epoch"
    empty = sum(corpus.manifest["empty"] for corpus in prepared.corpora)
    log.info(
        "train: %d pairs kept (%d with an empty side dropped, %s)%s; valid: %d pairs; "
        "vocabulary: %d source, %d target",
        len(batches),
        empty,
        dropped,
        mixed,
        valid,
        prepared.tokenizer.src_vocab_size,
        prepared.tokenizer.tgt_vocab_size,
    )
