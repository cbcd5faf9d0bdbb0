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
from seq2seq.data.source import CorpusSource, Langs
from seq2seq.data.sources import corpus_source
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
    # the piece id of each corpus's tag (data.tags), put before its sources; None: none
    tags: list[int | None] = field(default_factory=list)

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
    langs = (data.src, data.tgt)
    sources = [(corpus_source(c), a) for c, a in zip(data.train_corpora, data.aligned, strict=True)]
    for source, aligned in sources:  # every file is found before anything is trained
        source.files(langs, aligned)
    with preparation_lock(directory, log):
        sources = [
            (cleaned_source(source, settings, directory, langs, aligned, log), aligned)
            for (source, aligned), settings in zip(sources, data.corpus_filters, strict=True)
        ]
        tokenizer = _tokenizer(data, cfg, directory, seed, log, [s for s, _ in sources])
        corpora = [
            prepare_corpus(tokenizer, directory, source, langs, log, aligned=aligned)
            for source, aligned in sources
        ]
        samples = _samples(data, tokenizer)
        sampled = prepare_samples(tokenizer, directory, sources, langs, samples, log)
    return TrainingData(tokenizer, corpora, sampled, _tag_ids(data, cfg, tokenizer))


def _tag_ids(data: DataConfig, cfg: TokenizerConfig, tokenizer: Tokenizer) -> list[int | None]:
    """The source piece id of each corpus's tag; one line for a tag the tokenizer splits
    (a given `tokenizer.model` trained without it)."""
    ids = []
    for tag in data.tags or [None] * len(data.train_corpora):
        found = None if tag is None else tokenizer.src_piece_id(tag)
        if tag is not None and found is None:
            raise UserError(
                f"data.tags: {tag} is not a piece of tokenizer.model {cfg.model}, so it would be "
                "split; give a model trained with it as a user-defined symbol, or leave "
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
    sources: list[CorpusSource],
) -> Tokenizer:
    """The tokenizer of `directory`: loaded, copied from `cfg.model`, or trained on the
    training corpora (`sources`, as cleaned)."""
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
    langs = (data.src, data.tgt)
    chunks = training_chunks(sources, langs)
    # Read before saying anything: a corpus of one chunk is checked whole, and its error
    # (lines that differ in count, invalid UTF-8) is the only line printed.
    first = next(chunks)
    if log:
        log.info("training a %s SentencePiece model (%d pieces)", cfg.model_type, cfg.vocab_size)
    src = (line for chunk in chain([first], chunks) for line in chunk.src)
    tgt = (line for chunk in training_chunks(sources, langs) for line in chunk.tgt)
    tags = data.tag_names
    return train_tokenizer(cfg, _tagless(src, tags), _tagless(tgt, tags), directory, seed)


def _tagless(lines: Iterator[str], tags: list[str]) -> Iterator[str]:
    """The lines, or one line naming a tag that one of them holds: SentencePiece keeps a
    tag whole wherever it stands, so text that holds it would be cut around it (the tag
    `sise` in the word `sise` becomes the tag)."""
    for line in lines:
        for tag in tags:
            if tag in line:
                raise UserError(
                    f"data.tags: {tag} occurs in the training text ({line[:60]!r}); a tag must "
                    "be a piece the text never holds: name another"
                )
        yield line


def training_chunks(sources: list[CorpusSource], langs: Langs) -> Iterator[PairChunk]:
    """The pairs of every training corpus, in order, read as preparation reads them (pairs
    with an empty side left out); a corpus with none is an error."""
    for source in sources:
        pairs = 0
        for chunk in source.chunks(langs, CHUNK_PAIRS):
            pairs += len(chunk.src)
            if chunk.src:
                yield chunk
        if not pairs:
            raise UserError(f"{source}: every training pair has an empty side; check the corpus")
