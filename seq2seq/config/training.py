"""The config's training section (`train`): the loop, its budgets, the optimizer and the
learning-rate schedule, validation and checkpoints."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveInt, field_validator, model_validator

from seq2seq.config.section import Section

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


VALIDATION_LOSS = "loss"  # train.metric's name of the validation loss (lower is better)
# train.metric's name of the validation's alignment error rate against data.valid_alignments'
# gold links, in % (lower is better)
VALIDATION_AER = "aer"


def validation_metrics() -> list[str]:
    """What every validation measures: each metric of the table, then the loss."""
    # Here, not at the top: sacrebleu is slow to import and most config readers score nothing.
    from seq2seq.metrics import METRICS

    return [*(metric.key for metric in METRICS), VALIDATION_LOSS]


def metric_of(name: str) -> str:
    """The metric `train.metric` names, less the pair it may name first (fr-en/bleu: the
    BLEU of the fr-en validation corpus; a plain name, the mean over the pairs)."""
    return name.rpartition("/")[2]


def selection_metrics() -> list[str]:
    """What `train.metric` may name: a validation metric, or the alignment error rate."""
    return [*validation_metrics(), VALIDATION_AER]


_Beta = Annotated[float, Field(ge=0, lt=1)]


class DistillConfig(Section):
    """Word-level knowledge distillation: the student learns each next piece from a
    teacher's distribution as well as from the reference (docs/training.md#distillation)."""

    teachers: list[Annotated[str, Field(min_length=1)]] = Field(
        min_length=1,
        description="the trained run directories that teach (several: their ensemble, the "
        "mean of their log-probabilities); they must share the student's tokenizer",
    )
    checkpoint: str = Field("best", min_length=1, description="the teachers' checkpoint")
    weight: float = Field(
        0.5,
        ge=0,
        le=1,
        description="lambda: the loss is (1 - lambda) x cross-entropy + lambda x the KL "
        "divergence from the teacher's distribution to the student's, per target piece",
    )
    top_k: int = Field(
        8, ge=1, le=1000, description="the teacher's k most probable pieces, renormalised"
    )
    temperature: float = Field(
        1.0,
        gt=0,
        le=100,
        description="both distributions softened as softmax(z / T), the KL scaled by T^2",
    )


class LoraConfig(Section):
    """Low-rank adaptation (Hu et al., 2021): the fine-tuned model's weights stay frozen,
    and each targeted projection W learns an update (alpha / rank) B A of rank `rank`
    (docs/trained-models.md#lora)."""

    rank: int = Field(8, ge=1, le=1024, description="the rank r of each update B A")
    alpha: float = Field(16.0, gt=0, le=10_000, description="the update's scale is alpha / rank")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the update's input")
    targets: list[Literal["q", "k", "v", "o", "ffn"]] = Field(
        default_factory=lambda: ["q", "k", "v", "o"],
        min_length=1,
        description="what is adapted: the attention's query, key, value and output "
        "projections (every attention module that has them), and the Transformer's "
        "feed-forward layers",
    )

    @field_validator("targets")
    @classmethod
    def _each_once(cls, targets: list[str]) -> list[str]:
        if len(set(targets)) < len(targets):
            raise ValueError("a target is given twice; give each once")
        return targets


class OptimizerConfig(Section):
    name: Literal["adam", "adamw"] = Field("adam", description="adamw: decoupled weight decay")
    lr: float = Field(1e-3, gt=0, le=10, description="learning rate (the peak, with warm-up)")
    betas: tuple[_Beta, _Beta] = Field((0.9, 0.999), description="Adam's moment decay rates")
    weight_decay: float = Field(0.0, ge=0, le=10, description="L2 penalty (adamw: decoupled)")


class ScheduleConfig(Section):
    type: Literal["constant", "plateau", "inverse_sqrt", "cosine"] = Field(
        "constant",
        description="plateau: cut on a validation plateau; inverse_sqrt: lr / sqrt(step); "
        "cosine: from lr down to min_lr along half a cosine, ending at train.max_steps",
    )
    warmup_steps: int = Field(0, ge=0, description="linear warm-up from 0 to lr")
    factor: float = Field(0.5, gt=0, lt=1, description="plateau: lr multiplier on a plateau")
    patience: int = Field(2, ge=0, description="plateau: validations without improvement")
    min_lr: float = Field(
        1e-6,
        ge=0,
        le=10,
        description="after warm-up the lr is never below this (cosine: its end); at most "
        "train.optimizer.lr",
    )


class TrainConfig(Section):
    batch_tokens: PositiveInt = Field(4096, description="sentences x longer padded side")
    accumulate: PositiveInt = Field(
        1,
        le=1024,
        description="batches per update: their gradients are summed, the loss normalised by "
        "all their target tokens, before one optimizer step (an update of N x batch_tokens "
        "in the memory of one batch); steps count updates",
    )
    max_epochs: PositiveInt = Field(30, description="budget: passes over the training data")
    max_steps: PositiveInt | None = Field(None, description="budget: updates; null: no limit")
    max_time: float | None = Field(
        None,
        le=366 * 86400,
        description="budget: wall-clock seconds, or a duration: 90s, 25m, 1h30m",
    )
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="Adam")
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig, description="the lr schedule")
    clip_grad_norm: float = Field(1.0, ge=0, le=1e6, description="0 disables clipping")
    label_smoothing: float = Field(0.1, ge=0, lt=1, description="of the cross-entropy loss")
    ema_decay: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="an exponential moving average of the weights at this decay (0.999: about "
        "the last 1,000 updates), which validation scores and checkpoints keep for "
        "translation; null: the weights themselves",
    )
    alignment_weight: float = Field(
        0.05,
        gt=0,
        le=100,
        description="guided alignment (data.alignments): lambda, the weight of the "
        "cross-entropy of the model's attention (model.alignment_layer's, its "
        "alignment_heads averaged) against the gold alignment, per target token, added to "
        "the loss",
    )
    valid_every: PositiveInt = Field(500, description="updates between validations")
    attention_diagnostics: bool = Field(
        True,
        description="measure every attention module's entropy, saturation, energies and "
        "sink mass at each validation (docs/attention.md); false: skip it",
    )
    heatmaps: int = Field(
        3,
        ge=0,
        le=100,
        description="the first validation sentences whose attention heatmaps each validation "
        "draws (RUN/attention/, TensorBoard); 0: none",
    )
    log_every: PositiveInt = Field(100, description="updates between log lines")
    metric: str = Field(
        "bleu",
        description="what picks the best checkpoint and early stopping: a metric of the "
        "validation translations (seq2seq.metrics.METRICS), the validation loss, or aer, "
        "the attention's alignment error rate against gold links (needs "
        "data.valid_alignments); with several validation corpora, their mean, or one "
        "pair's as PAIR/METRIC (fr-en/bleu)",
        json_schema_extra=lambda schema: schema.update(
            pattern=f"^([^/]+/)?({'|'.join(selection_metrics())})$"  # METRIC or PAIR/METRIC
        ),
    )
    test_checkpoint: Literal["best", "last", "average"] = Field(
        "best",
        description="the checkpoint that translates the test sets: best (by metric), last, or "
        "average (the mean of the kept step-N checkpoints, the keep_best best by metric); "
        "the last one's test scores are also kept, in test/last/",
    )
    patience: PositiveInt | None = Field(10, description="early stopping, in validations")
    keep_best: PositiveInt = Field(3, description="step-N checkpoints kept, the best by metric")
    max_skipped_updates: PositiveInt = Field(
        10, description="stop after this many non-finite updates in a row"
    )
    threads: PositiveInt | None = Field(
        None,
        description="CPU threads; default: the CPUs this process may use, shared among "
        "torchrun's processes on the machine; may change on resume",
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA if available")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32",
        description="bf16: autocast the training forward pass (GPU, or a CPU with native "
        "bf16); fp16: the same in fp16 with gradient scaling (CUDA only)",
    )
    cuda_graphs: bool = Field(
        True,
        description="on one CUDA GPU in bf16 or fp32, Transformer: pad batches to a few shapes "
        "and replay each shape's update as a CUDA graph (docs/training.md); false: launch it "
        "op by op",
    )
    checkpoint_activations: bool = Field(
        False,
        description="transformer: keep each layer's input alone in the forward pass and "
        "recompute the rest in the backward pass (torch.utils.checkpoint): less memory for "
        "more compute, the same gradients; no CUDA graphs",
    )
    distill: DistillConfig | None = Field(
        None,
        description="word-level knowledge distillation from trained teacher runs; null: none "
        "(docs/training.md#distillation)",
    )
    lora: LoraConfig | None = Field(
        None,
        description="fine-tune low-rank adapters alone, the weights of train.init_from "
        "frozen; null: every weight trains (docs/trained-models.md#lora)",
    )
    init_from: str | None = Field(
        None,
        description="fine-tune: start from this run directory's best checkpoint (or this "
        ".pt file in a run) and its tokenizer, with a fresh optimizer, schedule and step count",
    )

    @model_validator(mode="after")
    def _cosine_needs_its_end(self) -> TrainConfig:
        if self.schedule.type != "cosine":
            return self
        if self.max_steps is None or self.max_steps <= self.schedule.warmup_steps:
            raise ValueError(
                f"schedule.type cosine decays until train.max_steps, which is "
                f"{'null' if self.max_steps is None else self.max_steps} with "
                f"{self.schedule.warmup_steps} warm-up steps; set max_steps above warmup_steps"
            )
        return self

    @model_validator(mode="after")
    def _floor_below_peak(self) -> TrainConfig:
        lr, floor = self.optimizer.lr, self.schedule.min_lr
        if floor > lr:
            raise ValueError(
                f"schedule.min_lr {floor:g} is above optimizer.lr {lr:g}, so the schedule would "
                "train at min_lr; set min_lr below lr"
            )
        return self

    @field_validator("max_time", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float | None:
        return None if value is None else parse_duration(value)

    @field_validator("metric")
    @classmethod
    def _validated(cls, value: str) -> str:
        names = selection_metrics()
        if metric_of(value) not in names:
            raise ValueError(f"unknown metric {value!r}; known: {', '.join(names)}")
        return value
