"""Low-rank adaptation (`train.lora`; Hu et al., 2021): each targeted projection
y = W x + b keeps W and b frozen and learns y = W x + b + (alpha / r) B A x, A (r, in)
drawn as a linear layer's weight is, B (out, r) zero, so that training starts from the
model it adapts. Written here rather than with `peft`: peft's layers rename the weights
they wrap (`base_layer.weight`), which every checkpoint reader (translation, averaging,
export, fine-tuning) would then have to know; these keep their names, so that a
checkpoint's adapters merge into the plain model's weights (`checkpoint.merged_weights`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional

from seq2seq.checkpoint import save_checkpoint
from seq2seq.config import Config, LoraConfig
from seq2seq.errors import UserError
from seq2seq.models.dropout import Dropout

LORA_BASE = "base"  # the checkpoint (checkpoints/base.pt) of the weights a LoRA run adapts
LORA_SUFFIXES = ("lora_a", "lora_b")  # the adapters' parameter names in a state dict
# What each target adapts: the attention projections by name, the feed-forward layers.
TARGETS = {
    "q": ("query_proj",),
    "k": ("key_proj",),
    "v": ("value_proj",),
    "o": ("out_proj",),
    "ffn": ("feed_forward.0", "feed_forward.3"),
}


class LoraLinear(nn.Module):
    """A frozen linear layer plus its low-rank update; its parameters keep the layer's
    names (weight, bias) beside the adapters' (lora_a, lora_b)."""

    def __init__(self, base: nn.Linear, settings: LoraConfig) -> None:
        super().__init__()
        self.weight, self.bias = base.weight, base.bias
        self.in_features, self.out_features = base.in_features, base.out_features
        rank = settings.rank
        self.lora_a = nn.Parameter(base.weight.new_empty(rank, base.in_features))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # as nn.Linear draws a weight
        self.lora_b = nn.Parameter(base.weight.new_zeros(base.out_features, rank))
        self.scale = settings.alpha / rank
        self.lora_dropout = Dropout(settings.dropout)

    def forward(self, x: Tensor) -> Tensor:
        low_rank = functional.linear(self.lora_dropout(x), self.lora_a)
        update = functional.linear(low_rank, self.lora_b)
        return functional.linear(x, self.weight, self.bias) + update * self.scale


def add_adapters(model: nn.Module, settings: LoraConfig) -> list[str]:
    """Freeze every parameter of `model` and put a `LoraLinear` in place of each linear
    layer that `settings.targets` names; the names of those layers. A target that names
    no layer of this model is a one-line `UserError`."""
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    adapted = []
    for target in settings.targets:
        found = [
            name
            for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name.endswith(TARGETS[target])
        ]
        if not found:
            raise UserError(
                f"train.lora.targets: {target} adapts {' or '.join(TARGETS[target])}, and this "
                "model has no such layer; leave it out"
            )
        for name in found:
            parent, _, child = name.rpartition(".")
            owner = model.get_submodule(parent)
            setattr(owner, child, LoraLinear(getattr(owner, child), settings))
        adapted += found
    return adapted


def adapt(model: nn.Module, cfg: Config, base: Path | None, tokenizer: str) -> None:
    """Freeze `model` and add the adapters of `cfg.train.lora`; first, where `base` is
    given (a new run), keep the weights adapted there, a checkpoint of the tokenizer with
    `tokenizer` as its fingerprint, which the run's checkpoints name (`weights_state`)."""
    if base is not None:
        kept = {"model": model.state_dict(), "model_config": cfg.model.model_dump(mode="json")}
        save_checkpoint(base, kept | {"tokenizer": tokenizer})
    add_adapters(model, cfg.train.lora)  # type: ignore[arg-type]


def weights_state(model: nn.Module, settings: LoraConfig | None) -> dict[str, Any]:
    """The model as a checkpoint keeps it: all its weights, or with adapters (`settings`)
    the adapters alone and the name of the base they adapt (`checkpoint.model_weights`)."""
    if settings is None:
        return {"model": model.state_dict()}
    adapters = {
        name: tensor
        for name, tensor in model.state_dict().items()
        if name.rpartition(".")[2] in LORA_SUFFIXES
    }
    base = {"base": f"{LORA_BASE}.pt", "scale": settings.alpha / settings.rank}
    return {"model": adapters, "lora": base}


@torch.no_grad()
def merged(model: nn.Module) -> nn.Module:
    """`model` with each `LoraLinear` replaced by a plain linear layer of weight
    W + (alpha / r) B A: the same function without the adapters' extra work."""
    for name, module in list(model.named_modules()):
        if isinstance(module, LoraLinear):
            shape = (module.in_features, module.out_features)
            plain = nn.Linear(*shape, bias=module.bias is not None, device="meta")  # no draw
            weight = module.weight + module.scale * module.lora_b @ module.lora_a
            plain.weight, plain.bias = nn.Parameter(weight), module.bias
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, plain)
    return model
