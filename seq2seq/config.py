"""Typed, validated run configuration: the one home of defaults.

A YAML file is read with `yaml.safe_load`, dotted `--set key=value` overrides are
applied, and the result is validated by pydantic models that forbid unknown keys.
Every validation problem becomes one `UserError` line naming the field, the bad
value and what is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from seq2seq.errors import UserError

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def parse_duration(value: Any) -> float:
    """Seconds from a number of seconds or a string such as '90s', '25m', '1h30m'."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 90s, 25m or 1h30m")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value).replace(" ", ""))
        if not match or not any(match.groups()):
            raise ValueError("expected a duration such as 90s, 25m or 1h30m")
        hours, minutes, secs = (float(g) if g else 0.0 for g in match.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    return seconds


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataConfig(Section):
    src: str = Field(min_length=1, description="source language suffix, e.g. de")
    tgt: str = Field(min_length=1, description="target language suffix, e.g. en")
    train: str = Field(description="prefix of the training corpus: {prefix}.{lang}[.gz]")
    valid: str = Field(description="prefix of the validation corpus")
    test: list[str] = Field(default_factory=list, description="prefixes scored after training")
    max_len: PositiveInt = Field(100, description="training pairs longer (in pieces) are dropped")


class TokenizerConfig(Section):
    type: Literal["sentencepiece"] = "sentencepiece"
    model_type: Literal["bpe", "unigram"] = "bpe"
    vocab_size: int = Field(8000, ge=8)
    joint: bool = True
    character_coverage: float = Field(1.0, gt=0, le=1)


class AttentionType(Protocol):
    """What the schema reads of a registered attention class (see `seq2seq.attention`)."""

    options: ClassVar[frozenset[str]]  # the AttentionConfig fields it reads (type, heads aside)
    default_heads: ClassVar[int]  # heads where neither `heads` nor the architecture says
    content_based: ClassVar[bool]  # whether local attention may wrap it as its score


# Attention types by name. The attention package registers each class here when it is
# imported (`@register_attention`): the schema sits below it and validates against it.
ATTENTION_TYPES: dict[str, type[AttentionType]] = {}


def _registered_types() -> dict[str, type[AttentionType]]:
    if not ATTENTION_TYPES:
        raise RuntimeError("no attention types registered: import seq2seq.attention first")
    return ATTENTION_TYPES


class AttentionConfig(Section):
    """The attention type and its options; a type's unused options must keep their defaults."""

    type: str = Field("bahdanau", description="a registered attention type")
    heads: PositiveInt | None = Field(
        None, description="H > 1: multi-head over `type`; default 1 (multihead: 4 if it divides)"
    )
    window: PositiveInt = Field(10, description="local-m/local-p: window half-width D")
    score: str = Field("general", description="local-m/local-p: the content score they wrap")
    renormalize: bool = Field(False, description="local-p: rescale Gaussian weights to sum to 1")
    max_source_len: PositiveInt = Field(256, description="location: longest source it scores")

    @field_validator("type")
    @classmethod
    def _registered(cls, value: str) -> str:
        names = sorted(_registered_types())
        if value not in names:
            raise ValueError(f"unknown attention type {value!r}; known: {', '.join(names)}")
        return value

    @field_validator("score")
    @classmethod
    def _content_score(cls, value: str) -> str:
        names = sorted(n for n, t in _registered_types().items() if t.content_based)
        if value not in names:
            raise ValueError(
                f"local attention wraps a content score; {value!r} is not one; "
                f"allowed: {', '.join(names)}"
            )
        return value

    @model_validator(mode="after")
    def _only_own_options(self) -> AttentionConfig:
        fields, own = type(self).model_fields, ATTENTION_TYPES[self.type].options
        unused = [
            name
            for name in sorted(set(fields) - {"type", "heads"} - own)
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


def _scaled_dot() -> AttentionConfig:
    return AttentionConfig(type="scaled-dot")


class ModelConfig(Section):
    """The architecture. `rnn` reads cell/bidirectional; `transformer` reads ff_dim, norm,
    self_attention, and uses hidden_dim as d_model (embed_dim must equal it)."""

    arch: Literal["rnn", "transformer"] = "rnn"
    cell: Literal["lstm", "gru"] = "lstm"
    embed_dim: PositiveInt = 256
    hidden_dim: PositiveInt = Field(512, description="RNN state size; transformer: d_model")
    encoder_layers: PositiveInt = 1
    decoder_layers: PositiveInt = 1
    bidirectional: bool = True
    ff_dim: PositiveInt = Field(1024, description="transformer: feed-forward inner size")
    norm: Literal["pre", "post"] = Field("pre", description="transformer: layer-norm placement")
    dropout: float = Field(0.3, ge=0, lt=1)
    tied_embeddings: bool = Field(False, description="share target embedding and output layer")
    shared_embeddings: bool = Field(
        False, description="one embedding for source and target (needs tokenizer.joint)"
    )
    attention: AttentionConfig = Field(
        default_factory=AttentionConfig, description="type and options; see README, Attention"
    )
    self_attention: AttentionConfig = Field(
        default_factory=_scaled_dot, description="transformer: encoder/decoder self-attention"
    )

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

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> ModelConfig:
        sections = [("attention", self.attention)]
        if self.arch == "transformer":
            sections.append(("self_attention", self.self_attention))
        for name, section in sections:
            heads = self.heads(section)
            if heads > 1 and self.hidden_dim % heads:
                raise ValueError(
                    f"{name}.heads = {heads} must divide hidden_dim = {self.hidden_dim}"
                )
        return self


class OptimizerConfig(Section):
    name: Literal["adam", "adamw"] = "adam"
    lr: float = Field(1e-3, gt=0)
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = Field(0.0, ge=0)


class ScheduleConfig(Section):
    type: Literal["constant", "plateau", "inverse_sqrt"] = "constant"
    warmup_steps: int = Field(0, ge=0, description="linear warm-up from 0 to lr")
    factor: float = Field(0.5, gt=0, lt=1, description="plateau: lr multiplier on a plateau")
    patience: int = Field(2, ge=0, description="plateau: validations without improvement")
    min_lr: float = Field(1e-6, ge=0)


class TrainConfig(Section):
    batch_tokens: PositiveInt = Field(4096, description="sentences x longer padded side")
    max_epochs: PositiveInt = 30
    max_steps: PositiveInt | None = None
    max_time: float | None = Field(None, description="wall-clock budget, e.g. 25m")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    clip_grad_norm: float = Field(1.0, ge=0, description="0 disables clipping")
    label_smoothing: float = Field(0.1, ge=0, lt=1)
    valid_every: PositiveInt = 500
    log_every: PositiveInt = 100
    metric: Literal["bleu", "chrf", "loss"] = "bleu"
    patience: PositiveInt | None = Field(10, description="early stopping, in validations")
    keep_best: PositiveInt = 3
    max_skipped_updates: PositiveInt = Field(
        10, description="stop after this many non-finite updates in a row"
    )
    threads: PositiveInt | None = Field(None, description="CPU threads; default: all cores")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["fp32", "bf16"] = Field(
        "fp32", description="bf16: autocast the training forward pass (CPU or GPU)"
    )

    @field_validator("max_time", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float | None:
        return None if value is None else parse_duration(value)


class DecodeConfig(Section):
    """How `translate`, `evaluate` and the test sets decode (validation is always greedy)."""

    beam: PositiveInt = Field(5, description="beam size; 1 is greedy search")
    length_penalty: float = Field(
        1.0, ge=0, description="GNMT alpha: score = log P / ((5 + length) / 6) ** alpha"
    )
    min_len: int = Field(1, ge=0, description="output tokens before EOS is allowed")
    max_len_ratio: float = Field(2.0, gt=0, description="output limit: ratio x source + offset")
    max_len_offset: int = Field(10, ge=0)
    batch_tokens: PositiveInt = Field(4000, description="padded source tokens x beam per batch")


class Config(Section):
    name: str = Field("run", pattern=r"^[A-Za-z0-9._-]+$")
    seed: int = 1
    data: DataConfig
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    decode: DecodeConfig = Field(default_factory=DecodeConfig)

    @model_validator(mode="after")
    def _shared_embeddings_need_one_vocabulary(self) -> Config:
        if self.model.shared_embeddings and not self.tokenizer.joint:
            raise ValueError(
                "model.shared_embeddings needs one vocabulary for both languages; "
                "set tokenizer.joint: true"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `dotted.key=value` override in place; the value is parsed as YAML."""
    key, sep, raw = assignment.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise UserError(
            f"bad override {assignment!r}: expected KEY=VALUE, e.g. train.max_steps=100"
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        value = raw
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise UserError(
                f"bad override {assignment!r}: {'.'.join(parts[: i + 1])} is not a section"
            )
        node = child
    node[parts[-1]] = value


def _allowed_keys(loc: tuple[Any, ...], model: type[BaseModel]) -> list[str]:
    for part in loc:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def describe_validation_error(error: ValidationError, root: type[BaseModel] | None = None) -> str:
    """All problems of a pydantic error as one line: field, bad value, what is allowed.

    `root` is the model that was validated (default: `Config`), for the allowed keys.
    """
    problems = []
    for item in error.errors():
        loc = tuple(item["loc"])
        field = ".".join(str(p) for p in loc) or "config"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            allowed = ", ".join(_allowed_keys(loc[:-1], root or Config))
            problems.append(f"unknown key {field!r}; allowed here: {allowed}")
        elif item["type"] == "missing":
            problems.append(f"{field}: required field is missing")
        elif isinstance(item.get("input"), dict):  # a check across fields of a section
            problems.append(f"{field}: {message}")
        else:
            problems.append(f"{field} = {item.get('input')!r}: {message}")
    return "config error: " + "; ".join(problems)


def config_from_dict(data: dict[str, Any], overrides: list[str] = ()) -> Config:
    for assignment in overrides:
        apply_override(data, assignment)
    try:
        return Config.model_validate(data)
    except ValidationError as error:
        raise UserError(describe_validation_error(error)) from None


def read_yaml(path: str | Path) -> Any:
    """The parsed content of a YAML file (None if empty); a missing file, bad YAML or
    text that is not UTF-8 is a one-line `UserError`."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file {path} not found; pass an existing YAML file to --config")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "cannot parse"
        raise UserError(f"{path}: invalid YAML{where}: {problem}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text; save the config as UTF-8") from None
    return data


def _read_mapping(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file's mapping, with the file named by its `extends` key (relative to it)
    underneath: sections merge key by key, and this file's values win."""
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: the top level must be a mapping of sections (data, model, ...)")
    parent = data.pop("extends", None)
    if parent is None:
        return data
    base = path.parent / str(parent)
    if base.resolve() in chain or base.resolve() == path.resolve():
        raise UserError(f"{path}: extends {parent} leads back to itself; break the cycle")
    if not base.is_file():
        raise UserError(f"{path}: extends {parent}, which is not a file (looked for {base})")
    return _merged(_read_mapping(base, (*chain, path.resolve())), data)


def _merged(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        both_sections = isinstance(value, dict) and isinstance(below, dict)
        merged[key] = _merged(below, value) if both_sections else value
    return merged


def load_config(path: str | Path, overrides: list[str] = ()) -> Config:
    """Read (following `extends`), override and validate a YAML config; every problem is a
    one-line `UserError`."""
    return config_from_dict(_read_mapping(Path(path)), overrides)


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
