"""The training data of a tokenizer directory made ready: the tokenizer trained on the
training corpora (or copied, or loaded), and each corpus prepared (corpus_encoder.py).

`seq2seq prepare`, a run's start and a sweep's shared tokenizers all come through
`prepare_training_data`; whatever is already there and still right is used as it is.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data.cleaning import cleaned_source
from seq2seq.data.corpus import PairChunk
from seq2seq.data.corpus_encoder import (
    CHUNK_PAIRS,
    preparation_lock,
    prepare_corpus,
    prepare_samples,
)
from seq2seq.data.prepared_corpus import PreparedCorpus
from seq2seq.data.source import CorpusInput
from seq2seq.data.sources import training_inputs
from seq2seq.data.tokenizer import (
    SegmentationSample,
    Tokenizer,
    copy_tokenizer,
    has_tokenizer,
    train_tokenizer,
    trained_settings,
)
from seq2seq.errors import UserError

_KEY_FORMAT = 2  # 1: the id cache's hash of the text itself


@dataclass
class TrainingData:
    tokenizer: Tokenizer
    corpora: list[PreparedCorpus]  # one per corpus of data.train, in its order
    # data.subword_sampling's segmentations: for each, the corpora as above (none: off)
    samples: list[list[PreparedCorpus]] = field(default_factory=list)
    # the piece ids of each corpus's tags (its target language's, its data.tags'), put
    # before its sources
    tags: list[list[int]] = field(default_factory=list)

    @property
    def key(self) -> str:
        """The training data's identity, which a resumed run compares with its checkpoint's:
        the tokenizer, the content hash of every text file, and the sampling settings."""
        digest = hashlib.sha256(f"format {_KEY_FORMAT}\n{self.tokenizer.fingerprint}".encode())
        for corpus in self.corpora:
            digest.update("".join(f"\n{sha}" for sha in corpus.sources_sha256).encode())
        for sample in self.samples:  # added only with sampling: keys made before hold
            digest.update(f"\n{sample[0].manifest['sample']}".encode())
        return digest.hexdigest()[:32]


def prepare_training_data(
    data: DataConfig,
    cfg: TokenizerConfig,
    directory: Path,
    seed: int,
    log: logging.Logger | None = None,
) -> TrainingData:
    """The tokenizer in `directory` and the prepared corpus of each training corpus (and,
    with `data.subword_sampling`, of each of its sampled segmentations).
    The tokenizer is made there first (trained on the training corpora, or copied from
    `cfg.model`) if there is none, or if the one there was made with another tokenizer
    config (left by a start that failed)."""
    directory = Path(directory)
    inputs = training_inputs(data)
    for source, langs, aligned in inputs:  # every file is found before anything is trained
        source.files(langs, aligned)
    with preparation_lock(directory, log):
        inputs = [
            corpus._replace(
                source=cleaned_source(
                    corpus.source, settings, directory, corpus.langs, corpus.aligned, log
                )
            )
            for corpus, settings in zip(inputs, data.corpus_filters, strict=True)
        ]
        tokenizer = _tokenizer(data, cfg, directory, seed, log, inputs)
        corpora = [
            prepare_corpus(tokenizer, directory, source, langs, log, aligned=aligned)
            for source, langs, aligned in inputs
        ]
        samples = _samples(data, tokenizer)
        sampled = prepare_samples(tokenizer, directory, inputs, samples, log)
    return TrainingData(tokenizer, corpora, sampled, _tag_ids(data, cfg, tokenizer))


def _tag_ids(data: DataConfig, cfg: TokenizerConfig, tokenizer: Tokenizer) -> list[list[int]]:
    """The source piece ids of each corpus's tags (`DataConfig.corpus_tags`); one line for
    a tag the tokenizer splits (a given `tokenizer.model` trained without it)."""
    ids = []
    for tags in data.corpus_tags:
        found = [tokenizer.src_piece_id(tag) for tag in tags]
        for tag, piece in zip(tags, found, strict=True):
            if piece is None:
                what = "data.tags" if tag in data.tag_names else "data.target_tags"
                raise UserError(
                    f"{what}: {tag} is not a piece of tokenizer.model {cfg.model}, so it would "
                    "be split; give a model trained with it as a user-defined symbol, or leave "
                    "tokenizer.model out to train one"
                )
        ids.append(found)
    return ids


def _samples(data: DataConfig, tokenizer: Tokenizer) -> list[SegmentationSample]:
    """The segmentations `data.subword_sampling` asks for; one line where its `nbest`
    would be ignored (BPE-dropout has no n best)."""
    sampling = data.subword_sampling
    if sampling.alpha is None:
        return []
    if sampling.nbest != -1 and tokenizer.algorithms != {"unigram"}:
        raise UserError(
            "data.subword_sampling.nbest picks among a unigram model's best segmentations, "
            f"and the tokenizer is {'/'.join(sorted(tokenizer.algorithms))}: leave it -1"
        )
    return [
        SegmentationSample(sampling.alpha, sampling.nbest, number)
        for number in range(sampling.segmentations)
    ]


def _tokenizer(
    data: DataConfig,
    cfg: TokenizerConfig,
    directory: Path,
    seed: int,
    log: logging.Logger | None,
    inputs: list[CorpusInput],
) -> Tokenizer:
    """The tokenizer of `directory`: loaded, copied from `cfg.model`, or trained on the
    training corpora (`inputs`, as cleaned)."""
    recorded = trained_settings(directory) if directory.is_dir() else None
    if has_tokenizer(directory) and recorded in (None, cfg.model_dump()):
        return Tokenizer.load(directory)
    if log and has_tokenizer(directory):
        log.warning("%s was made with other settings (%s); replacing it", directory, recorded)
    if cfg.model is not None:
        tokenizer = copy_tokenizer(cfg, directory)
        if log:
            log.info("tokenizer: %s, copied to %s", cfg.model, directory)
        return tokenizer
    chunks = training_chunks(inputs)
    # Read before saying anything: a corpus of one chunk is checked whole, and its error
    # (lines that differ in count, invalid UTF-8) is the only line printed.
    first = next(chunks)
    if log:
        log.info("training a %s SentencePiece model (%d pieces)", cfg.model_type, cfg.vocab_size)
    src = (line for chunk in chain([first], chunks) for line in chunk.src)
    tgt = (line for chunk in training_chunks(inputs) for line in chunk.tgt)
    return train_tokenizer(cfg, _tagless(src, data), _tagless(tgt, data), directory, seed)


def _tagless(lines: Iterator[str], data: DataConfig) -> Iterator[str]:
    """The lines, or one line naming a tag (`data.symbols`) that one of them holds:
    SentencePiece keeps a tag whole wherever it stands, so text that holds it would be cut
    around it (the tag `sise` in the word `sise` becomes the tag)."""
    tags = data.symbols
    for line in lines:
        for tag in tags:
            if tag in line:
                field, fix = (
                    ("data.tags", "name another")
                    if tag in data.tag_names
                    else ("data.target_tags", "set data.target_tags false")
                )
                raise UserError(
                    f"{field}: {tag} occurs in the training text ({line[:60]!r}); a tag must "
                    f"be a piece the text never holds: {fix}"
                )
        yield line


def training_chunks(inputs: list[CorpusInput]) -> Iterator[PairChunk]:
    """The pairs of every training corpus, in order, read as preparation reads them (pairs
    with an empty side left out); a corpus with none is an error."""
    for source, langs, _ in inputs:
        pairs = 0
        for chunk in source.chunks(langs, CHUNK_PAIRS):
            pairs += len(chunk.src)
            if chunk.src:
                yield chunk
        if not pairs:
            raise UserError(f"{source}: every training pair has an empty side; check the corpus")
