"""The attention sections of the config (`model.attention`, `model.self_attention`) and
the registry of attention types they are validated against."""

from __future__ import annotations

from typing import ClassVar, Literal, Protocol

from pydantic import Field, PositiveInt, field_validator, model_validator

from seq2seq.config.registry import Registry
from seq2seq.config.section import Section


class AttentionType(Protocol):
    """What the schema reads of a registered attention class (see `seq2seq.attention`)."""

    options: ClassVar[frozenset[str]]  # the AttentionConfig fields it reads (type, heads aside)
    default_heads: ClassVar[int]  # heads where neither `heads` nor the architecture says
    content_based: ClassVar[bool]  # whether local attention may wrap it as its score


# Attention types by name: the attention package registers each class as it is imported
# (`@register_attention`), and the schema validates against it.
ATTENTION_TYPES: Registry[type[AttentionType]] = Registry("attention types")


class NormalizerType(Protocol):
    """What the schema reads of a registered normalizer (seq2seq/attention/normalizers.py)."""

    options: ClassVar[frozenset[str]]  # the AttentionConfig fields it alone reads


# What turns energies into weights, for every type, by name: registered as the attention
# package is imported (hard: one position chosen from the softmax's distribution, hard.py).
NORMALIZERS: Registry[type[NormalizerType]] = Registry("normalizers")


def _content_scores() -> list[str]:
    """The types local attention may wrap: those that score by content alone."""
    return sorted(n for n, t in ATTENTION_TYPES.registered().items() if t.content_based)


# Options every type reads, beside its normalizer's own (NORMALIZERS: their `options`).
_SHARED_OPTIONS = frozenset({"type", "heads", "bias", "normalizer", "dropout"})
Estimator = Literal["exact", "reinforce", "gumbel"]


class HardAttentionConfig(Section):
    """Hard attention (`normalizer: hard`): how training estimates its gradient and which
    positions translation reads (docs/attention.md). Each option is read by the estimator
    or inference rule `READ_BY` names; the others must keep their defaults."""

    estimator: Estimator | None = Field(
        None,
        description="exact: the marginal over positions (the RNN only); reinforce: a sampled "
        "position and the score-function gradient; gumbel: straight-through Gumbel-softmax; "
        "null: exact in the RNN, gumbel in the transformer",
    )
    inference: Literal["argmax", "k", "exact"] = Field(
        "argmax",
        description="which positions evaluation and translation read: the most probable; the "
        "k most probable, renormalised; exact: the marginal (the RNN only)",
    )
    k: int = Field(2, ge=2, le=1024, description="inference k: how many positions")
    temperature: float = Field(
        1.0, gt=0, le=100, description="gumbel: the temperature of its softmax"
    )
    baseline: Literal["soft", "moving-average"] = Field(
        "soft",
        description="reinforce: what the reward is compared with: the log-likelihood with soft "
        "attention, or a moving average of the rewards",
    )
    decay: float = Field(
        0.99, ge=0, lt=1, description="baseline moving-average: its decay per update"
    )
    entropy_bonus: float = Field(
        0.0,
        ge=0,
        le=100,
        description="reinforce, gumbel: the weight of the entropy of the "
        "position distribution added to the objective",
    )

    # Option -> the estimators or inference rules that read it.
    READ_BY: ClassVar[dict[str, tuple[str, ...]]] = {
        "k": ("inference k",),
        "temperature": ("estimator gumbel",),
        "baseline": ("estimator reinforce",),
        "decay": ("baseline moving-average",),
        "entropy_bonus": ("estimator reinforce", "estimator gumbel"),
    }

    def reads(self, option: str) -> bool:
        """Whether an option of this section is read under its estimator and inference."""
        settings = {f"estimator {self.estimator}", f"inference {self.inference}"}
        if self.estimator == "reinforce":
            settings.add(f"baseline {self.baseline}")
        return bool(settings & set(self.READ_BY[option]))

    def for_architecture(self, arch: str) -> HardAttentionConfig:
        """This section with a null estimator resolved: exact in the RNN, gumbel in the
        Transformer (which cannot sum over the positions)."""
        if self.estimator is not None:
            return self
        return self.model_copy(update={"estimator": "exact" if arch == "rnn" else "gumbel"})

    def problem(self, arch: str, heads: int) -> str | None:
        """Why this section cannot be, with `heads` heads in architecture `arch`: an option
        its estimator and inference rule do not read set to other than its default, or
        what the architecture cannot compute; None if nothing."""
        fields = type(self).model_fields
        for option in self.READ_BY:
            if getattr(self, option) != fields[option].default and not self.reads(option):
                return (
                    f"{option} is read by {' or '.join(self.READ_BY[option])} only; remove it "
                    "or set that"
                )
        if arch == "transformer" and "exact" in (self.estimator, self.inference):
            which = "estimator" if self.estimator == "exact" else "inference"
            fix = "reinforce or gumbel" if which == "estimator" else "argmax or k"
            return (
                f"{which} exact sums over the positions, which only the RNN can (its next steps "
                f"read the expected context); in the transformer set {which} {fix}"
            )
        if arch == "rnn" and heads > 1:
            return (
                f"heads = {heads}: the RNN's hard attention chooses a position of one head; "
                "set model.attention.heads: 1"
            )
        return None


class AttentionConfig(Section):
    """The attention type and its options; a type's unused options must keep their defaults."""

    type: str = Field(
        "bahdanau",
        description="a registered attention type",
        json_schema_extra=ATTENTION_TYPES.names_in,
    )
    heads: PositiveInt | None = Field(
        None,
        description="heads; H > 1 runs `type` once per head; null: 4 in the transformer, "
        "else the type's own (multihead: 4 where it divides hidden_dim, the others 1)",
    )
    bias: bool = Field(
        False,
        description="multi-head attention (several heads, or type multihead): biases in its "
        "query, key, value and output projections (Marian's, BERT's); false: none, as "
        "Vaswani et al.",
    )
    window: PositiveInt = Field(10, description="local-m/local-p: window half-width D")
    score: str = Field(
        "general",
        description="local-m/local-p: the content score they wrap",
        json_schema_extra=lambda schema: schema.update(enum=_content_scores()),
    )
    renormalize: bool = Field(False, description="local-p: rescale Gaussian weights to sum to 1")
    max_source_len: PositiveInt = Field(256, description="location: longest source it scores")
    temperature: float | None = Field(
        None,
        gt=0,
        le=1e4,
        description="dot, scaled-dot, cosine, multihead: the initial value g0 of a multiplier g "
        "of the energies; null: the type's own (cosine 10; the others none, g = 1)",
    )
    learn_temperature: bool = Field(
        True,
        description="dot, scaled-dot, cosine, multihead: learn g (as exp(s), s from log g0); "
        "false: g stays g0 (false needs a temperature)",
    )

    normalizer: str = Field(
        "softmax",
        description="every type: softmax; sparsemax or entmax15 (exact zeros); entmax: "
        "alpha-entmax with a learned alpha in (1, 2), from 1.5; hard: one position chosen "
        "from the softmax (model.attention only; see hard) (docs/attention.md)",
        json_schema_extra=NORMALIZERS.names_in,
    )
    alpha_per_head: bool = Field(
        True, description="normalizer entmax: one learned alpha per head; false: one per module"
    )
    hard: HardAttentionConfig = Field(
        default_factory=HardAttentionConfig,
        description="normalizer hard: its estimator and inference rule",
    )
    dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="every type: while training, each weight zeroed with this probability "
        "and the others scaled by 1 / (1 - p) before the weighted sum (attention dropout); "
        "0: none",
    )

    @property
    def is_hard(self) -> bool:
        """Whether it chooses positions (normalizer `hard`: a sample, or the most probable,
        of the softmax's distribution) rather than weighting them all; the one place the
        name is compared, so that what hard attention changes asks this."""
        return self.normalizer == "hard"

    @field_validator("type")
    @classmethod
    def _registered(cls, value: str) -> str:
        names = sorted(ATTENTION_TYPES.registered())
        if value not in names:
            raise ValueError(f"unknown attention type {value!r}; known: {', '.join(names)}")
        return value

    @field_validator("normalizer")
    @classmethod
    def _registered_normalizer(cls, value: str) -> str:
        return NORMALIZERS.checked(value)

    @field_validator("score")
    @classmethod
    def _content_score(cls, value: str) -> str:
        names = _content_scores()
        if value not in names:
            raise ValueError(
                f"local attention wraps a content score; {value!r} is not one; "
                f"allowed: {', '.join(names)}"
            )
        return value

    @model_validator(mode="after")
    def _only_own_options(self) -> AttentionConfig:
        fields, own = type(self).model_fields, ATTENTION_TYPES.registered()[self.type].options
        normalizers = [n.options for n in NORMALIZERS.registered().values()]
        unused = [
            name
            for name in sorted(set(fields) - _SHARED_OPTIONS.union(*normalizers) - own)
            if getattr(self, name) != fields[name].default
        ]
        if unused:
            given = ", ".join(f"{name}={getattr(self, name)!r}" for name in unused)
            mine = ", ".join(sorted(own | {"heads"}))
            raise ValueError(
                f"{self.type} attention does not read {given}; its options: {mine}; "
                "remove the others"
            )
        return self

    @model_validator(mode="after")
    def _none_normalises_nothing(self) -> AttentionConfig:
        if self.type == "none" and self.normalizer != "softmax":
            raise ValueError(
                f"normalizer {self.normalizer} would normalise nothing: type none has no "
                "attention weights; remove normalizer"
            )
        return self

    @model_validator(mode="after")
    def _no_dropout_of_a_choice(self) -> AttentionConfig:
        if self.dropout and self.is_hard:
            raise ValueError(
                f"dropout={self.dropout} would drop hard attention's chosen position (and break "
                "its exact marginal); set dropout: 0 or another normalizer"
            )
        return self

    @model_validator(mode="after")
    def _normalizer_options_are_its_own(self) -> AttentionConfig:
        """An option a normalizer reads alone (entmax's alpha_per_head, hard's hard) is
        refused, where set, with any other normalizer."""
        registered, fields = NORMALIZERS.registered(), type(self).model_fields
        for option in sorted(set().union(*(n.options for n in registered.values()))):
            readers = sorted(name for name, n in registered.items() if option in n.options)
            default = fields[option].get_default(call_default_factory=True)
            if self.normalizer not in readers and getattr(self, option) != default:
                raise ValueError(
                    f"{option} is read by normalizer {' or '.join(readers)} only, not "
                    f"{self.normalizer}; remove it or set normalizer: {readers[0]}"
                )
        return self

    @model_validator(mode="after")
    def _fixed_temperature_has_a_value(self) -> AttentionConfig:
        if not self.learn_temperature and self.temperature is None:
            raise ValueError(
                "learn_temperature: false fixes the temperature at its initial value; "
                "give that value as temperature (cosine's own is 10)"
            )
        return self


class SelfAttentionConfig(AttentionConfig):
    """The Transformer's self-attention: the options of `AttentionConfig`, scaled-dot by
    default. A class of its own, so that its defaults are the same whether the section is
    absent, empty or partly written."""

    type: str = Field(
        "scaled-dot",
        description="a registered attention type",
        json_schema_extra=ATTENTION_TYPES.names_in,
    )
