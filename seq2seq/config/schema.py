"""The run configuration's schema: typed sections, their ranges and cross-field checks,
and the one home of defaults. Unknown keys, inf and NaN are errors in every section."""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Protocol

import yaml
from pydantic import (
    Field,
    PositiveInt,
    field_validator,
    model_validator,
)

from seq2seq.config.attention import (
    ATTENTION_TYPES,
    AttentionConfig,
    SelfAttentionConfig,
)
from seq2seq.config.corpora import pair_name
from seq2seq.config.data import DataConfig, TokenizerConfig
from seq2seq.config.decode import DecodeConfig
from seq2seq.config.registry import Registry
from seq2seq.config.section import Section
from seq2seq.config.training import VALIDATION_AER, TrainConfig


class PositionType(Protocol):
    """What the schema and the export read of a registered positional encoding
    (`seq2seq.attention.positions`)."""

    in_embeddings: ClassVar[bool]  # sinusoids added to the embeddings, none in the attention
    exportable: ClassVar[bool]  # whether CTranslate2 (which adds sinusoids) runs it

    @classmethod
    def problem(cls, model: ModelConfig) -> str | None:
        """Why `model` cannot read positions this way, or None."""


# Positional encodings by name, registered by `seq2seq.attention.positions`.
POSITION_TYPES: Registry[type[PositionType]] = Registry("positional encodings")


class ModelConfig(Section):
    """The architecture. `rnn` reads cell/bidirectional; `transformer` reads ff_dim, norm,
    self_attention, and uses hidden_dim as d_model (embed_dim must equal it)."""

    arch: Literal["rnn", "transformer"] = Field("rnn", description="the architecture")
    cell: Literal["lstm", "gru"] = Field("lstm", description="rnn: the recurrent cell")
    # Sized for a CPU: a first result in minutes on a laptop (README, "Train on your own
    # data"); the recipes in configs/ set larger models.
    embed_dim: PositiveInt = Field(128, description="embedding size")
    hidden_dim: PositiveInt = Field(128, description="RNN state size; transformer: d_model")
    encoder_layers: PositiveInt = Field(1, description="encoder layers")
    decoder_layers: PositiveInt = Field(1, description="decoder layers")
    bidirectional: bool = Field(True, description="rnn: a bidirectional encoder")
    ff_dim: PositiveInt = Field(512, description="transformer: feed-forward inner size")
    norm: Literal["pre", "post"] = Field("pre", description="transformer: layer-norm placement")
    norm_type: Literal["layernorm", "rmsnorm"] = Field(
        "layernorm",
        description="transformer: the norm, LayerNorm or RMSNorm (Zhang and Sennrich, 2019: "
        "no centring, no bias), wherever `norm` places one",
    )
    ffn_activation: Literal["relu", "gelu", "silu", "swiglu", "geglu"] = Field(
        "relu",
        description="transformer: the feed-forward layers' activation; silu is swish; swiglu "
        "and geglu are gated (Shazeer, 2020: act(xW) * xV), their inner size 2/3 of ff_dim "
        "so that the parameters stay those of ff_dim",
    )
    scale_embedding: bool = Field(
        True, description="transformer: embeddings times sqrt(hidden_dim) (Vaswani et al.)"
    )
    final_norm: bool | None = Field(
        None,
        description="transformer: a norm after each stack's last layer; null: where `norm` "
        "is pre (post-norm layers end in one)",
    )
    output_bias: bool = Field(
        False, description="transformer: a bias in the output layer (Marian's final logits bias)"
    )
    positions: str = Field(
        "sinusoidal",
        description="transformer: how it reads where its tokens are, a registered positional "
        "encoding: sinusoids added to the embeddings (Vaswani et al.), or in the "
        "self-attention, ALiBi's bias, T5's relative bias or RoPE's rotation "
        "(docs/attention.md)",
        json_schema_extra=POSITION_TYPES.names_in,
    )
    dropout: float = Field(0.3, ge=0, lt=1, description="dropout probability")

    @property
    def final_norms(self) -> bool:
        """Whether each Transformer stack ends in a norm (`final_norm`; null: pre-norm's)."""
        return self.norm == "pre" if self.final_norm is None else self.final_norm

    @field_validator("ffn_activation", mode="before")
    @classmethod
    def _swish_is_silu(cls, value: Any) -> Any:
        return "silu" if value == "swish" else value

    tied_embeddings: bool = Field(False, description="share target embedding and output layer")
    shared_embeddings: bool = Field(
        False, description="one embedding for source and target (needs tokenizer.joint)"
    )
    attention: AttentionConfig = Field(
        default_factory=AttentionConfig, description="the decoder's attention over the source"
    )
    self_attention: SelfAttentionConfig = Field(
        default_factory=SelfAttentionConfig,
        description="transformer: the encoder's and decoder's self-attention",
    )
    alignment_layer: int = Field(
        -1,
        description="transformer: the decoder layer whose attention over the source is the "
        "model's attention (counted from 0; negative: from the last): what word alignments, "
        "attention maps, the coverage penalty and guided alignment read",
    )
    alignment_heads: int = Field(
        0,
        ge=0,
        description="the first N heads of that attention are the model's attention, averaged "
        "where one is not asked for (CTranslate2's alignment_heads); 0: all",
    )
    # Fields that do not change what the trained weights compute (they shape training, or
    # which weights are read): a checkpoint loads, and a run fine-tunes, under other values.
    TRAINING_ONLY: ClassVar[frozenset[str]] = frozenset(
        {
            "dropout",
            "attention.dropout",
            "self_attention.dropout",
            "alignment_layer",
            "alignment_heads",
        }
    )
    # The attention sections each architecture reads (the others are not used).
    ATTENTION_SECTIONS: ClassVar[dict[str, tuple[str, ...]]] = {
        "rnn": ("attention",),
        "transformer": ("attention", "self_attention"),
    }

    def attention_sections(self) -> dict[str, AttentionConfig]:
        """The attention sections this architecture reads, by field name: `attention` (the
        decoder's over the source) always, `self_attention` in the Transformer."""
        return {name: getattr(self, name) for name in self.ATTENTION_SECTIONS[self.arch]}

    @model_validator(mode="after")
    def _biases_have_projections(self) -> ModelConfig:
        for name, section in self.attention_sections().items():
            if section.bias and self.heads(section) == 1 and section.type != "multihead":
                raise ValueError(
                    f"model.{name}.bias: {section.type} attention with one head has no "
                    "multi-head projections to bias; give it heads > 1, or leave bias false"
                )
        return self

    def describe_attention(self) -> str:
        """Each attention section this architecture reads, with its type and heads, for
        logs: 'attention: general, 4 heads; self_attention: scaled-dot, 4 heads', with the
        normalizer where it is not softmax ('attention: general, 1 head, sparsemax'; hard
        attention with its estimator: 'hard (reinforce)')."""
        parts = []
        for name, section in self.attention_sections().items():
            heads = self.heads(section)
            normalizer = "" if section.normalizer == "softmax" else f", {section.normalizer}"
            if section.is_hard:
                normalizer += f" ({section.hard.estimator})"
            parts.append(
                f"{name}: {section.type}, {heads} head{'s' if heads > 1 else ''}{normalizer}"
            )
        return "; ".join(parts)

    def heads(self, section: AttentionConfig) -> int:
        """The number of heads of an attention section of this model: its `heads` if set;
        else 4 in the Transformer; else the type's own default where it divides hidden_dim
        (multihead: 4); else 1. More than one wraps the type in multi-head attention."""
        if section.heads is not None:
            return section.heads
        if self.arch == "transformer":
            return 4
        own = ATTENTION_TYPES[section.type].default_heads
        return own if self.hidden_dim % own == 0 else 1

    @model_validator(mode="after")
    def _tying_needs_equal_sizes(self) -> ModelConfig:
        if self.arch == "transformer" and self.embed_dim != self.hidden_dim:
            raise ValueError(
                f"the transformer needs embed_dim == hidden_dim, its d_model "
                f"(got {self.embed_dim} and {self.hidden_dim})"
            )
        if self.tied_embeddings and self.embed_dim != self.hidden_dim:
            raise ValueError(
                f"tied_embeddings needs embed_dim == hidden_dim "
                f"(got {self.embed_dim} and {self.hidden_dim})"
            )
        return self

    @field_validator("positions")
    @classmethod
    def _registered_positions(cls, value: str) -> str:
        if problem := POSITION_TYPES.problem(value):
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _positions_fit(self) -> ModelConfig:
        """The RNN reads positions through its recurrence; an encoding's own checks."""
        default = type(self).model_fields["positions"].default
        if self.arch == "rnn" and self.positions != default:
            raise ValueError(
                f"positions={self.positions} is the Transformer's; the RNN reads positions "
                "through its recurrence: remove it or set arch: transformer"
            )
        if problem := POSITION_TYPES.registered()[self.positions].problem(self):
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _hard_attention_fits(self) -> ModelConfig:
        """Hard attention in `attention` only, its estimator resolved for the architecture
        where it is null, and what the architecture cannot compute refused."""
        if self.self_attention.is_hard:
            why = {
                "transformer": "a position chosen there reaches every later position and layer",
                "rnn": "the RNN has no self-attention",
            }[self.arch]
            raise ValueError(
                f"self_attention.normalizer: hard is not supported ({why}); use it in "
                "model.attention"
            )
        section = self.attention
        if section.is_hard:
            hard = section.hard.for_architecture(self.arch)
            problem = hard.problem(self.arch, self.heads(section))
            if problem is not None:
                raise ValueError(f"attention.hard: {problem}")
            # A new section, not the given one changed: a caller may share that one.
            self.attention = section.model_copy(update={"hard": hard})
        return self

    @model_validator(mode="after")
    def _aligning_attention_exists(self) -> ModelConfig:
        layers = self.decoder_layers if self.arch == "transformer" else 1
        if not -layers <= self.alignment_layer < layers:
            which = f"the decoder's {layers} layers" if layers > 1 else "the one attention"
            raise ValueError(
                f"alignment_layer {self.alignment_layer} is outside {which} "
                f"({-layers} to {layers - 1}); give one of them, or -1 for the last"
            )
        heads = self.heads(self.attention)
        if self.alignment_heads > heads:
            raise ValueError(
                f"alignment_heads {self.alignment_heads}: the attention has {heads} "
                f"head{'s' if heads > 1 else ''}; give at most that, or 0 for all"
            )
        return self

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> ModelConfig:
        for name, section in self.attention_sections().items():
            heads = self.heads(section)
            if heads > 1 and self.hidden_dim % heads:
                raise ValueError(
                    f"{name}.heads = {heads} must divide hidden_dim = {self.hidden_dim}"
                )
        return self


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
        if self.train.metric == VALIDATION_AER and not self.data.valid_alignments:
            raise ValueError(
                "train.metric aer picks the checkpoint by the validation's alignment error "
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
        pairs = [pair_name(self.data.pair(corpus)) for corpus in self.data.valid_corpora]
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
