"""The config's sections about the text: the parallel corpora (`data`), their subword
sampling, and the SentencePiece tokenizer (`tokenizer`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, PositiveInt, field_validator, model_validator

from seq2seq.config.filters import FiltersConfig
from seq2seq.config.section import Section

SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")  # the tokenizer's own: no symbol's
WORD_MARK = "\u2581"  # SentencePiece's "▁"


def check_symbol(value: str) -> str:
    """A piece a user names (a tag, a user symbol): some text without whitespace, not one
    of the tokenizer's special pieces."""
    if not value or any(character.isspace() for character in value):
        raise ValueError(f"{value!r} is not one piece: give some text without whitespace")
    if value in SPECIAL_PIECES:
        raise ValueError(f"{value} is a special piece of the tokenizer; name another")
    if WORD_MARK in value:  # SentencePiece's mark of a word's start, in every word
        raise ValueError(
            f"{value} holds {WORD_MARK}, which starts every word's piece; name another"
        )
    return value


Symbol = Annotated[str, AfterValidator(check_symbol)]


class SubwordSamplingConfig(Section):
    """Subword regularization: the training pairs in segmentations sampled from the
    tokenizer, not its one best (docs/training.md)."""

    alpha: float | None = Field(
        None,
        gt=0,
        le=1,
        description="null: off. unigram: the smoothing of the sampled segmentation's "
        "probability (lower: more varied; 0.1 to 0.5 are usual); bpe: BPE-dropout's chance "
        "of leaving out each merge (0.1 is usual)",
    )
    nbest: int = Field(
        -1,
        ge=-1,
        description="unigram: sample among the N best segmentations (N >= 2), -1: among all",
    )
    segmentations: int = Field(
        8,
        ge=1,
        le=1000,
        description="sampled segmentations of the training corpora, prepared once and kept; "
        "epoch e trains on number e mod this",
    )

    @field_validator("nbest")
    @classmethod
    def _more_than_one(cls, value: int) -> int:
        if value in (0, 1):
            raise ValueError("sampling among the 1 best is no sampling; give -1 (all) or 2 or more")
        return value


# A path ending so names one file of pairs, of that kind; any other path, a prefix of two.
CORPUS_FILE_SUFFIXES = {"tsv": (".tsv", ".tsv.gz"), "jsonl": (".jsonl", ".jsonl.gz")}


class DatasetCorpus(Section):
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


# A corpus: a prefix of `{prefix}.{lang}[.gz]` files, a TSV or JSON lines file, or a dataset.
CorpusSpec = str | DatasetCorpus


def corpus_name(corpus: CorpusSpec) -> str:
    """What a corpus's outputs are named by: a prefix's last part, a file's name less its
    suffix, a dataset's `name`."""
    if isinstance(corpus, DatasetCorpus):
        return corpus.name or f"{Path(corpus.dataset).name}-{corpus.split}"
    name = Path(corpus).name
    for suffixes in CORPUS_FILE_SUFFIXES.values():
        for suffix in sorted(suffixes, key=len, reverse=True):
            if name.endswith(suffix):
                return name.removesuffix(suffix)
    return name


def describe_corpus(corpus: CorpusSpec) -> str:
    """A corpus as messages name it."""
    if isinstance(corpus, DatasetCorpus):
        return f"dataset {corpus.dataset} (split {corpus.split})"
    return corpus


class DataConfig(Section):
    src: str = Field(min_length=1, description="source language suffix, e.g. de")
    tgt: str = Field(min_length=1, description="target language suffix, e.g. en")
    train: CorpusSpec | list[CorpusSpec] = Field(
        description="the training corpus: a prefix of {prefix}.{lang}[.gz] files, a .tsv or "
        ".jsonl file (.gz too), or a dataset mapping; or a list of them, trained on together "
        "(each prepared once: docs/training.md#corpus-formats)"
    )
    weights: list[Annotated[float, Field(gt=0, le=1000)]] | None = Field(
        None,
        description="how often an epoch holds each training corpus's pairs, one weight per "
        "data.train corpus: 3 = each pair three times, 0.5 = a random half drawn anew each "
        "epoch (default: 1 each)",
    )
    valid: CorpusSpec = Field(description="the validation corpus (given as data.train's)")
    test: list[CorpusSpec] = Field(
        default_factory=list,
        description="corpora scored after training (given as data.train's); one need not be a list",
    )
    tags: list[Symbol | None] | None = Field(
        None,
        description="a tag per data.train corpus, in its order (null: none), put before each "
        "source of that corpus as one piece: tagged back-translation, domains "
        "(docs/training.md#tags); decode.tag puts one before the sources translated",
    )
    alignments: bool | list[bool] = Field(
        False,
        description="guided alignment: train the attention towards the word alignments of "
        "{prefix}.align (Pharaoh: i-j links source word i and target word j, one line a "
        "pair; prefix corpora only), true for every data.train corpus or one true/false per "
        "corpus; train.alignment_weight weighs its loss (docs/training.md#guided-alignment)",
    )
    valid_alignments: bool = Field(
        False,
        description="score the attention's word alignments of the validation pairs "
        "(forced on the references, as `score --alignments`) against {valid}.align, gold "
        "Pharaoh links (i-j sure, i?j possible), at every validation: AER, precision and "
        "recall in the log, TensorBoard and summary.json (docs/training.md#guided-alignment)",
    )
    filters: list[FiltersConfig] = Field(
        default_factory=list,
        description="cleaning of the training corpora at prepare: none (the default); "
        "recommended (every filter with its defaults, for crawled corpora); a mapping of "
        "filters (the FiltersConfig table); or a list, one of these per data.train corpus "
        "(docs/training.md#cleaning)",
    )
    max_len: PositiveInt = Field(100, description="training pairs longer (in pieces) are dropped")
    max_len_ratio: float | None = Field(
        None,
        ge=1,
        description="training pairs whose longer side has more than this many times the "
        "pieces of the shorter are dropped (misaligned pairs); null: none",
    )
    subword_sampling: SubwordSamplingConfig = Field(
        default_factory=SubwordSamplingConfig,
        description="subword regularization of the training pairs (unigram sampling, BPE-dropout)",
    )

    @field_validator("train")
    @classmethod
    def _some_training_corpus(cls, value: CorpusSpec | list[CorpusSpec]) -> Any:
        if value == []:
            raise ValueError("an empty list; give at least one corpus")
        return value

    @property
    def train_corpora(self) -> list[CorpusSpec]:
        """`train` as a list, one corpus or several."""
        return list(self.train) if isinstance(self.train, list) else [self.train]

    @property
    def aligned(self) -> list[bool]:
        """`alignments` per data.train corpus."""
        if isinstance(self.alignments, bool):
            return [self.alignments] * len(self.train_corpora)
        return list(self.alignments)

    @property
    def corpus_filters(self) -> list[FiltersConfig]:
        """`filters` per data.train corpus: one for all, or each its own."""
        if len(self.filters) > 1:
            return list(self.filters)
        return (self.filters or [FiltersConfig()]) * len(self.train_corpora)

    @field_validator("filters", mode="before")
    @classmethod
    def _named_filters(cls, value: Any) -> list:
        """A name (`recommended`, `none`) or one mapping, for every corpus; or a list."""
        values = value if isinstance(value, list) else [value]
        return [
            v if isinstance(v, (dict, FiltersConfig)) else FiltersConfig.named(v) for v in values
        ]

    @property
    def tag_names(self) -> list[str]:
        """The distinct tags of `tags`, in order."""
        return list(dict.fromkeys(tag for tag in self.tags or () if tag is not None))

    @model_validator(mode="after")
    def _one_per_corpus(self) -> DataConfig:
        corpora = len(self.train_corpora)
        lists = (
            ("weights", self.weights, "weight"),
            ("tags", self.tags, "tag"),
            ("alignments", None if isinstance(self.alignments, bool) else self.alignments, "flag"),
            ("filters", self.filters if len(self.filters) > 1 else None, "setting"),
        )
        for name, values, what in lists:
            if values is not None and len(values) != corpora:
                raise ValueError(
                    f"{name} has {len(values)} values for {corpora} training "
                    f"{'corpus' if corpora == 1 else 'corpora'} (data.train); give one {what} "
                    "per corpus, in its order"
                )
        return self

    @field_validator("test", mode="before")
    @classmethod
    def _one_corpus_is_a_list_of_one(cls, value: Any) -> Any:
        return [value] if isinstance(value, (str, dict, DatasetCorpus)) else value

    @field_validator("test")
    @classmethod
    def _test_names_differ(cls, corpora: list[CorpusSpec]) -> list[CorpusSpec]:
        # Each set's output is test/NAME.TGT and its scores are keyed by NAME.
        names = [corpus_name(corpus) for corpus in corpora]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            clash = [describe_corpus(c) for c in corpora if corpus_name(c) == twice[0]]
            raise ValueError(
                f"two test sets are named {twice[0]} ({', '.join(clash)}); their outputs would "
                "overwrite each other in test/: rename one (a dataset by its `name`)"
            )
        return corpora


class TokenizerConfig(Section):
    type: Literal["sentencepiece"] = Field("sentencepiece", description="the tokenizer library")
    model_type: Literal["bpe", "unigram"] = Field("bpe", description="SentencePiece's algorithm")
    vocab_size: int = Field(8000, ge=8, description="pieces per vocabulary")
    joint: bool = Field(True, description="one vocabulary for both languages; false: one each")
    character_coverage: float = Field(
        1.0, gt=0, le=1, description="share of characters covered; rarer ones become <unk>"
    )
    byte_fallback: bool = Field(
        False,
        description="a character outside the vocabulary becomes its UTF-8 bytes (256 pieces "
        "of the vocabulary), not <unk>, and translations can write it",
    )
    user_symbols: list[Symbol] = Field(
        default_factory=list,
        description="pieces kept whole wherever they occur, never split (data.tags's tags "
        "are added here)",
    )

    @field_validator("user_symbols")
    @classmethod
    def _each_once(cls, symbols: list[str]) -> list[str]:
        twice = next((symbol for symbol in symbols if symbols.count(symbol) > 1), None)
        if twice is not None:
            raise ValueError(f"{twice} is given twice; give each symbol once")
        return symbols

    model: str | None = Field(
        None,
        description="use this SentencePiece model instead of training one: a .model file (both "
        "sides), or a directory with joint.model or src.model and tgt.model; model_type, "
        "vocab_size, character_coverage, byte_fallback and user_symbols are then not read",
    )
