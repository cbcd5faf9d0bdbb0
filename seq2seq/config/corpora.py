"""How a config names a corpus (data.train, data.valid, data.test): a prefix of
`{prefix}.{lang}[.gz]` files, a TSV or JSON lines file, either as a string or as a mapping
with the languages of its pair, or a Hugging Face dataset; and the names its outputs take."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag

from seq2seq.config.section import Section

# A path ending so names one file of pairs, of that kind; any other path, a prefix of two.
CORPUS_FILE_SUFFIXES = {"tsv": (".tsv", ".tsv.gz"), "jsonl": (".jsonl", ".jsonl.gz")}


class CorpusPair(Section):
    """The languages of one corpus's pair, where it has its own (a multilingual run)."""

    src: str | None = Field(None, min_length=1, description="its source language; null: data.src")
    tgt: str | None = Field(None, min_length=1, description="its target language; null: data.tgt")


class PathCorpus(CorpusPair):
    """A prefix or file corpus given as a mapping, with the languages of its pair
    (docs/training.md#many-language-pairs)."""

    path: str = Field(
        min_length=1, description="the corpus as data.train names one: a prefix, a .tsv or .jsonl"
    )


class DatasetCorpus(CorpusPair):
    """A Hugging Face dataset as a parallel corpus (docs/training.md#corpus-formats)."""

    dataset: str = Field(
        min_length=1,
        description="a directory written by save_to_disk, a parquet or arrow file (or a "
        "directory or glob of them), or a dataset on the Hugging Face hub, streamed",
    )
    split: str = Field("train", min_length=1, description="the split to read")
    subset: str | None = Field(None, description="the hub dataset's configuration, e.g. de-en")
    columns: dict[str, str] | None = Field(
        None,
        description="language -> the column of its text; null: a `translation` column of "
        "{language: text} objects, or columns named as the languages",
    )
    name: str | None = Field(
        None,
        min_length=1,
        description="what its outputs are named by (test/NAME.hyp); default: the dataset's "
        "last part and the split, e.g. wmt14-test",
    )


UNION_TAG = "~"  # starts the tag of a union's member in an error's location (loading.py)


def _corpus_kind(value: Any) -> str:
    """Which kind of corpus a value is read as: a mapping with `dataset` a dataset, any
    other mapping a path with its pair, anything else a path."""
    if isinstance(value, DatasetCorpus) or (isinstance(value, dict) and "dataset" in value):
        return f"{UNION_TAG}DatasetCorpus"
    if isinstance(value, (dict, PathCorpus)):
        return f"{UNION_TAG}PathCorpus"
    return f"{UNION_TAG}str"


# A corpus: a prefix of `{prefix}.{lang}[.gz]` files, a TSV or JSON lines file (either as
# a string or a mapping with its pair), or a dataset. Discriminated, so that a bad one's
# error names what it was read as, not every kind it is not.
CorpusSpec = Annotated[
    Annotated[str, Tag(f"{UNION_TAG}str")]
    | Annotated[PathCorpus, Tag(f"{UNION_TAG}PathCorpus")]
    | Annotated[DatasetCorpus, Tag(f"{UNION_TAG}DatasetCorpus")],
    Discriminator(_corpus_kind),
]

# One corpus, or a list of them (data.train, data.valid).
Corpora = Annotated[
    Annotated[CorpusSpec, Tag(f"{UNION_TAG}one")]
    | Annotated[list[CorpusSpec], Tag(f"{UNION_TAG}list")],
    Discriminator(lambda value: f"{UNION_TAG}{'list' if isinstance(value, list) else 'one'}"),
]


def corpus_path(corpus: str | PathCorpus) -> str:
    """The prefix or file a corpus of files names."""
    return corpus.path if isinstance(corpus, PathCorpus) else corpus


def corpus_name(corpus: CorpusSpec) -> str:
    """What a corpus's outputs are named by: a prefix's last part, a file's name less its
    suffix, a dataset's `name`."""
    if isinstance(corpus, DatasetCorpus):
        return corpus.name or f"{Path(corpus.dataset).name}-{corpus.split}"
    name = Path(corpus_path(corpus)).name
    for suffixes in CORPUS_FILE_SUFFIXES.values():
        for suffix in sorted(suffixes, key=len, reverse=True):
            if name.endswith(suffix):
                return name.removesuffix(suffix)
    return name


def pair_name(pair: tuple[str, str]) -> str:
    """A pair as outputs and metrics name it: fr-en."""
    return "-".join(pair)


def describe_corpus(corpus: CorpusSpec) -> str:
    """A corpus as messages name it."""
    if isinstance(corpus, DatasetCorpus):
        return f"dataset {corpus.dataset} (split {corpus.split})"
    return corpus_path(corpus)
