"""The config's section about the text: the parallel corpora (`data`), their languages,
tags, weights and cleaning."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from pydantic import Field, PositiveInt, field_validator, model_validator

from seq2seq.config.corpora import (
    CORPUS_FILE_SUFFIXES,
    Corpora,
    CorpusPair,
    CorpusSpec,
    DatasetCorpus,
    corpus_name,
    corpus_path,
    describe_corpus,
    pair_name,
)
from seq2seq.config.filters import FiltersConfig
from seq2seq.config.languages import SourceTags, target_tag
from seq2seq.config.section import Section
from seq2seq.config.tokenizer import SubwordSamplingConfig, Symbol


class DataConfig(Section):
    src: str | None = Field(
        None,
        min_length=1,
        description="source language suffix, e.g. de: every corpus's where its entry names "
        "none (required unless each does)",
    )
    tgt: str | None = Field(
        None,
        min_length=1,
        description="target language suffix, e.g. en: every corpus's where its entry names "
        "none (required unless each does)",
    )
    train: Corpora = Field(
        description="the training corpus: a prefix of {prefix}.{lang}[.gz] files, a .tsv or "
        ".jsonl file (.gz too), or a dataset mapping; or a list of them, trained on together "
        "(each prepared once: docs/training.md#corpus-formats); a mapping {path: P, src: fr, "
        "tgt: en} gives a corpus its own pair (docs/training.md#many-language-pairs)"
    )
    weights: list[Annotated[float, Field(gt=0, le=1000)]] | None = Field(
        None,
        description="how often an epoch holds each training corpus's pairs, one weight per "
        "data.train corpus: 3 = each pair three times, 0.5 = a random half drawn anew each "
        "epoch (default: 1 each); with data.temperature, the sizes it samples by",
    )
    temperature: float | None = Field(
        None,
        gt=0,
        le=100,
        description="sampling across the training corpora by temperature: each corpus's share "
        "of an epoch proportional to n^(1/T), n its pairs (times its data.weights); 1: by "
        "size, larger: nearer uniform (the small ones more often); null: off "
        "(docs/training.md#many-language-pairs)",
    )
    valid: Corpora = Field(
        description="the validation corpus (given as data.train's); a list: one per language "
        "pair, each scored apart and by their mean"
    )
    test: list[CorpusSpec] = Field(
        default_factory=list,
        description="corpora scored after training (given as data.train's); one need not be a list",
    )
    target_tags: bool | None = Field(
        None,
        description="put the target language's tag (<2en>) before every source, so that one "
        "model translates into several languages and is told which (decode.tgt_lang); "
        "null: where the training corpora have more than one target language",
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

    @field_validator("train", "valid")
    @classmethod
    def _some_corpus(cls, value: Corpora) -> Any:
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

    @property
    def valid_corpora(self) -> list[CorpusSpec]:
        """`valid` as a list, one corpus or several."""
        return list(self.valid) if isinstance(self.valid, list) else [self.valid]

    @property
    def valid_pairs(self) -> list[str]:
        """The pair of each validation corpus, as validation names it (fr-en)."""
        return [pair_name(self.pair(corpus)) for corpus in self.valid_corpora]

    def pair(self, corpus: CorpusSpec) -> tuple[str, str]:
        """The languages of a corpus: its entry's, else data.src and data.tgt."""
        own = corpus if isinstance(corpus, CorpusPair) else CorpusPair()
        return own.src or self.src or "", own.tgt or self.tgt or ""

    @property
    def target_languages(self) -> list[str]:
        """The training corpora's target languages, in order."""
        return list(dict.fromkeys(self.pair(corpus)[1] for corpus in self.train_corpora))

    @property
    def tags_targets(self) -> bool:
        """Whether each source has its target language's tag (`target_tags`)."""
        if self.target_tags is not None:
            return self.target_tags
        return len(self.target_languages) > 1

    @property
    def source_tags(self) -> SourceTags:
        """The tags a model trained on this data reads before a source."""
        languages = tuple(self.target_languages)
        return SourceTags(tuple(self.tag_names), languages, languages if self.tags_targets else ())

    @property
    def symbols(self) -> list[str]:
        """Every tag a source may hold, each a piece the tokenizer must keep whole."""
        targets = [target_tag(language) for language in self.source_tags.targets]
        return [*targets, *self.tag_names]

    @property
    def corpus_tags(self) -> list[list[str]]:
        """The tags before each source of each training corpus: its target language's
        (with target tags), then its tag of `tags`."""
        tags = self.tags or [None] * len(self.train_corpora)
        return [
            [target_tag(self.pair(corpus)[1])] * self.tags_targets + ([tag] if tag else [])
            for corpus, tag in zip(self.train_corpora, tags, strict=True)
        ]

    def tgt_lang(self, corpus: CorpusSpec) -> str | None:
        """The decode.tgt_lang that translates a corpus: its target language where sources
        carry one's tag (`tags_targets`), else None."""
        return self.pair(corpus)[1] if self.tags_targets else None

    @property
    def multilingual(self) -> bool:
        """Whether the corpora hold more than one pair: test sets are then named by theirs."""
        corpora = [*self.train_corpora, *self.valid_corpora, *self.test]
        return len({self.pair(corpus) for corpus in corpora}) > 1

    def test_name(self, corpus: CorpusSpec) -> str:
        """What a test set's outputs are named by (test/NAME.hyp): its `corpus_name`, and
        in a multilingual run its pair (test_2016_flickr.fr-en)."""
        name = corpus_name(corpus)
        return f"{name}.{pair_name(self.pair(corpus))}" if self.multilingual else name

    def _entries(self) -> Iterator[tuple[str, CorpusSpec, str]]:
        """(field, corpus, where: the field, with its index in a list of several) of every
        corpus entry, training, validation and test."""
        named = [("data.train", self.train_corpora), ("data.valid", self.valid_corpora)]
        for field, corpora in [*named, ("data.test", self.test)]:
            for number, corpus in enumerate(corpora):
                yield field, corpus, f"{field}[{number}]" if len(corpora) > 1 else field

    @model_validator(mode="after")
    def _every_corpus_has_a_pair(self) -> DataConfig:
        for _, corpus, where in self._entries():
            pair = self.pair(corpus)
            for side, language in zip(("src", "tgt"), pair, strict=True):
                if not language:
                    raise ValueError(
                        f"{where} ({describe_corpus(corpus)}) has no {side} language: give "
                        f"data.{side}, or {side} in its entry ({{path: ..., src: .., tgt: ..}})"
                    )
            if pair[0] == pair[1]:
                raise ValueError(
                    f"{where} ({describe_corpus(corpus)}) translates {pair[0]} into {pair[1]}: "
                    "give it two languages"
                )
        return self

    @model_validator(mode="after")
    def _evaluated_into_a_trained_language(self) -> DataConfig:
        """Validation and test sets translate into a language training translates into (a
        source language training never saw may be tried: zero-shot)."""
        targets = self.target_languages
        for field, corpus, where in self._entries():
            language = self.pair(corpus)[1]
            if field != "data.train" and language not in targets:
                raise ValueError(
                    f"{where} ({describe_corpus(corpus)}) is into {language}, and training "
                    f"translates into {', '.join(targets)} alone: evaluate into one of them, "
                    f"or train on a corpus into {language} too"
                )
        return self

    @model_validator(mode="after")
    def _a_tsv_file_one_way(self) -> DataConfig:
        """A TSV file's columns are its source and its target, whatever languages an entry
        names: one file is one pair (prefix files and JSON lines, read by language, serve
        several)."""
        seen: dict[str, tuple[str, str]] = {}
        for _, corpus, where in self._entries():
            path = "" if isinstance(corpus, DatasetCorpus) else corpus_path(corpus)
            if not path.endswith(CORPUS_FILE_SUFFIXES["tsv"]):
                continue
            pair = self.pair(corpus)
            first = seen.setdefault(path, pair)
            if pair != first:
                raise ValueError(
                    f"{where}: {path} is read as {pair_name(first)} and as {pair_name(pair)}, "
                    "and a TSV file's columns are the source and the target in that order: "
                    "give each way a file of its own (or prefix files, which serve both)"
                )
        return self

    @model_validator(mode="after")
    def _tags_apart(self) -> DataConfig:
        own = {target_tag(language): language for language in self.source_tags.targets}
        clash = next((tag for tag in self.tag_names if tag in own), None)
        if clash is not None:
            raise ValueError(
                f"data.tags has {clash}, the tag of target language {own[clash]} that "
                "data.target_tags puts before its sources: choose another tag"
            )
        return self

    @model_validator(mode="after")
    def _temperature_across_corpora(self) -> DataConfig:
        if self.temperature is not None and len(self.train_corpora) == 1:
            raise ValueError(
                "data.temperature samples across the training corpora, and data.train has one: "
                "remove it"
            )
        return self

    @model_validator(mode="after")
    def _one_validation_set_a_pair(self) -> DataConfig:
        pairs = self.valid_pairs
        twice = next((pair for pair in pairs if pairs.count(pair) > 1), None)
        if twice is not None:
            raise ValueError(
                f"data.valid has two corpora of {twice}; give one validation corpus per pair "
                "(each is scored apart)"
            )
        if self.valid_alignments and len(pairs) > 1:
            raise ValueError(
                "data.valid_alignments scores the attention on one validation corpus, and "
                "data.valid has several; give one, or set it false"
            )
        return self

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

    @model_validator(mode="after")
    def _test_names_differ(self) -> DataConfig:
        # Each set's output is test/NAME.hyp and its scores are keyed by NAME.
        corpora = self.test
        names = [self.test_name(corpus) for corpus in corpora]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            clash = [describe_corpus(c) for c in corpora if self.test_name(c) == twice[0]]
            raise ValueError(
                f"two test sets are named {twice[0]} ({', '.join(clash)}); their outputs would "
                "overwrite each other in test/: rename one (a dataset by its `name`)"
            )
        return self
