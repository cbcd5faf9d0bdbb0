"""The corpus of a config (data.train, data.valid, data.test) as its source: a prefix of two
line-aligned files, a TSV or JSON lines file, or a Hugging Face dataset. Training reads a
source in chunks, so that its size never matters to memory; validation and test sets are
read whole (`read_corpus`)."""

from __future__ import annotations

import json

from seq2seq.config import CorpusSpec, DataConfig, DatasetCorpus, PathCorpus, corpus_path
from seq2seq.config.corpora import CORPUS_FILE_SUFFIXES
from seq2seq.data.file_sources import JsonLines, PrefixFiles, TsvFile
from seq2seq.data.hf_dataset import HuggingFaceDataset
from seq2seq.data.source import CorpusInput, CorpusSource, ParallelCorpus


def corpus_source(spec: CorpusSpec) -> CorpusSource:
    """The source of a config's corpus: a dataset mapping, a file whose name says its kind
    (.tsv, .jsonl, either .gz), else a prefix."""
    if isinstance(spec, DatasetCorpus):
        return HuggingFaceDataset(spec)
    path = corpus_path(spec)  # the languages of a mapping's pair are the config's to give
    kinds = {"tsv": TsvFile, "jsonl": JsonLines}
    for kind, suffixes in CORPUS_FILE_SUFFIXES.items():
        if path.endswith(suffixes):
            return kinds[kind](path)
    return PrefixFiles(path)


def training_inputs(data: DataConfig) -> list[CorpusInput]:
    """Each data.train corpus as preparation reads it, in the languages of its pair."""
    corpora = zip(data.train_corpora, data.aligned, strict=True)
    return [CorpusInput(corpus_source(c), data.pair(c), aligned) for c, aligned in corpora]


def read_corpus(spec: CorpusSpec, src: str, tgt: str) -> ParallelCorpus:
    """All the pairs of a config's corpus (a validation or test set), in languages `src`
    and `tgt` (`DataConfig.pair`)."""
    return corpus_source(spec).read((src, tgt))


def spec_record(spec: CorpusSpec) -> str:
    """A corpus of the config as one JSON string (a child process's argument)."""
    return json.dumps(spec if isinstance(spec, str) else spec.model_dump())


def spec_from_record(record: str) -> CorpusSpec:
    """The corpus `spec_record` wrote."""
    value = json.loads(record)
    if isinstance(value, str):
        return value
    return DatasetCorpus(**value) if "dataset" in value else PathCorpus(**value)
