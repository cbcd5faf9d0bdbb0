"""The run configuration's schema: typed sections, their ranges and cross-field checks,
and the one home of defaults. Unknown keys, inf and NaN are errors in every section."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import Field, model_validator

from seq2seq.config.data import DataConfig
from seq2seq.config.decode import DecodeConfig
from seq2seq.config.model import ModelConfig
from seq2seq.config.section import Section
from seq2seq.config.tokenizer import TokenizerConfig
from seq2seq.config.training import VALIDATION_AER, TrainConfig, metric_of


class Config(Section):
    name: str = Field(
        "run", pattern=r"^[A-Za-z0-9._-]+$", description="the run's name; default dir runs/NAME"
    )
    seed: int = Field(
        1,
        ge=0,
        le=2**32 - 1,
        description="seeds initialisation, data order, dropout and SentencePiece (32 bits)",
    )
    data: DataConfig = Field(description="the parallel corpora")
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig, description="SentencePiece")
    model: ModelConfig = Field(default_factory=ModelConfig, description="the architecture")
    train: TrainConfig = Field(default_factory=TrainConfig, description="the training loop")
    decode: DecodeConfig = Field(default_factory=DecodeConfig, description="beam search")

    @model_validator(mode="after")
    def _shared_embeddings_need_one_vocabulary(self) -> Config:
        if self.model.shared_embeddings and not self.tokenizer.joint:
            raise ValueError(
                "model.shared_embeddings needs one vocabulary for both languages; "
                "set tokenizer.joint: true"
            )
        return self

    @model_validator(mode="after")
    def _bpe_samples_among_all(self) -> Config:
        sampling = self.data.subword_sampling
        trains_bpe = self.tokenizer.model is None and self.tokenizer.model_type == "bpe"
        if trains_bpe and sampling.alpha is not None and sampling.nbest != -1:
            raise ValueError(
                "data.subword_sampling.nbest picks among a unigram model's best segmentations; "
                "BPE-dropout has none: leave it -1, or set tokenizer.model_type: unigram"
            )
        return self

    @model_validator(mode="after")
    def _guided_attention_learns(self) -> Config:
        # The RNN's hard attention chooses at the prediction, from weights it forms softly:
        # those are guided. The Transformer's weights are the chosen positions.
        # `none`'s weights are uniform: nothing would learn from the guidance.
        if not any(self.data.aligned):
            return self
        attention = self.model.attention
        if attention.type == "none":
            raise ValueError(
                "data.alignments guides the attention's weights, and model.attention.type "
                "none has uniform ones that nothing learns; choose an attention type that "
                "scores, or set data.alignments: false"
            )
        if attention.is_hard and self.model.arch == "transformer":
            raise ValueError(
                "data.alignments guides the attention's weights, and the Transformer's hard "
                "attention's are the chosen positions; guide a soft or sparse normalizer (or "
                "the RNN's hard attention), or set data.alignments: false"
            )
        return self

    @model_validator(mode="after")
    def _aer_is_measured(self) -> Config:
        metric = self.train.metric
        if metric_of(metric) == VALIDATION_AER and not self.data.valid_alignments:
            raise ValueError(
                f"train.metric {metric} picks the checkpoint by the validation's alignment error "
                "rate, which only data.valid_alignments measures; set it true (with gold "
                "links in {valid}.align), or choose another metric"
            )
        return self

    @model_validator(mode="after")
    def _tags_are_pieces(self) -> Config:
        """decode.tag must be a tag the model trains with; a tokenizer trained here keeps
        every tag whole (added to tokenizer.user_symbols; a given one is checked when it
        is loaded)."""
        tags = self.data.tag_names
        if self.decode.tag is not None and self.decode.tag not in tags:
            trained = f"data.tags has {', '.join(tags)}" if tags else "data.tags is not set"
            raise ValueError(
                f"decode.tag {self.decode.tag} is not a tag the model trains with "
                f"({trained}); give one of them, or null"
            )
        targets = self.data.source_tags.targets
        if self.decode.tgt_lang is not None and self.decode.tgt_lang not in targets:
            known = f"one of {', '.join(targets)}" if targets else "null (it has one)"
            raise ValueError(
                f"decode.tgt_lang {self.decode.tgt_lang} is not a target language with a tag "
                f"in this run (data.target_tags); give {known}"
            )
        if self.tokenizer.model is None:
            symbols = self.tokenizer.user_symbols
            symbols += [tag for tag in self.data.symbols if tag not in symbols]
        return self

    @model_validator(mode="after")
    def _metric_of_a_validated_pair(self) -> Config:
        metric = self.train.metric
        pair, _, alone = metric.rpartition("/")
        pairs = self.data.valid_pairs
        if pair and len(pairs) == 1:
            raise ValueError(
                f"train.metric {metric} names the pair {pair}, and data.valid has one corpus, "
                f"scored without one: name the metric alone ({alone})"
            )
        if pair and pair not in pairs:
            raise ValueError(
                f"train.metric {metric} names the pair {pair}, and data.valid's are "
                f"{', '.join(pairs)}: name one of them, or the metric alone (their mean)"
            )
        return self

    @model_validator(mode="after")
    def _adapters_have_a_base(self) -> Config:
        if self.train.lora is None:
            return self
        if self.train.init_from is None:
            raise ValueError(
                "train.lora adapts a trained model and freezes its weights: give "
                "train.init_from (a run directory, or a checkpoint in one)"
            )
        if self.train.ema_decay is not None:
            raise ValueError(
                "train.lora with train.ema_decay: the moving average would be of the frozen "
                "weights too; set ema_decay null"
            )
        return self

    @model_validator(mode="after")
    def _recomputed_layers_are_transformers(self) -> Config:
        if not self.train.checkpoint_activations:
            return self
        if self.model.arch != "transformer":
            raise ValueError(
                "train.checkpoint_activations recomputes the Transformer's layers, and the "
                "RNN has none to recompute; set it false"
            )
        if self.model.attention.is_hard or self.model.self_attention.is_hard:
            raise ValueError(
                "train.checkpoint_activations would draw hard attention's positions anew when "
                "it recomputes a layer (from a generator of its own); set it false"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def config_differences(old: Config, new: Config) -> list[tuple[str, Any, Any]]:
    """(field, old value, new value) for every dotted field that differs."""
    a, b = flatten(old.to_dict()), flatten(new.to_dict())
    return [(k, a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
