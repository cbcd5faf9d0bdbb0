"""The model section of the run configuration (`model`): the architecture, its sizes and
blocks, its attention sections, and the table of positional encodings a floor above
registers."""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Protocol

from pydantic import Field, PositiveInt, field_validator, model_validator

from seq2seq.config.attention import ATTENTION_TYPES, AttentionConfig, SelfAttentionConfig
from seq2seq.config.registry import Registry
from seq2seq.config.section import Section


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
        return POSITION_TYPES.checked(value)

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
    def _transformer_options_of_a_transformer(self) -> ModelConfig:
        """The Transformer's block options (models/blocks.py), refused where the RNN would
        leave them unread (older Transformer-only fields stay allowed: old configs load)."""
        if self.arch != "rnn":
            return self
        fields = type(self).model_fields
        for name in ("norm_type", "ffn_activation", "scale_embedding", "final_norm", "output_bias"):
            if getattr(self, name) != fields[name].default:
                raise ValueError(
                    f"{name}={getattr(self, name)} is the Transformer's, and the RNN has no "
                    "such part: remove it or set arch: transformer"
                )
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
