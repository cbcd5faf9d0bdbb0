"""Weight formats that make decoding on the CPU faster: float32 weights prepacked for
oneDNN (the default on the CPU) and int8 (an option: it moves the outputs)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.models import Seq2Seq


class OneDNNOps(NamedTuple):
    """PyTorch's oneDNN linear product and its weight packing (what its own compiler uses
    for inference on CPUs)."""

    linear: Callable[..., Tensor]  # (x, packed weight, bias, "none", [], "") -> x W^T + b
    pack: Callable[[Tensor, int | None], Tensor]  # (weight, expected rows or None)


def _onednn_ops() -> OneDNNOps | None:
    """The ops, or None where this build of PyTorch has no oneDNN."""
    try:
        ops = torch.ops.mkldnn
        return OneDNNOps(ops._linear_pointwise.default, ops._reorder_linear_weight.default)
    except (AttributeError, RuntimeError):
        return None


ONEDNN = _onednn_ops()


class PackedLinear(nn.Linear):
    """A linear layer whose float32 weight is also held in oneDNN's blocked layout, so
    that inference runs oneDNN's product on it: on the CPU measured (docs/benchmarks.md)
    1.1-1.6x MKL's speed on the Multi30k Transformer's shapes, and several times it on
    the few rows of a decoding step near the end of a batch. Equal to `nn.Linear` up to
    float rounding.

    Anything else (gradients, other dtypes or devices) takes `nn.Linear`'s own path, and a
    weight changed in place since it was packed (its version counter tells) is packed
    again, so the layer stays a plain linear layer to whatever trains or reads it.
    """

    @classmethod
    def of(cls, linear: nn.Linear) -> PackedLinear:
        """A packed layer sharing `linear`'s parameters."""
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer.in_features, layer.out_features = linear.in_features, linear.out_features
        layer.weight, layer.bias = linear.weight, linear.bias
        layer.pack()
        return layer

    def pack(self) -> None:
        with torch.no_grad():
            self.packed = ONEDNN.pack(self.weight, None)
        self.packed_version = self.weight._version

    def __getstate__(self) -> dict:
        # oneDNN's layout has no storage to copy or pickle: a copy packs its own.
        state = self.__dict__.copy()
        del state["packed"]
        state["packed_version"] = None
        return state

    def runs_packed(self, x: Tensor) -> bool:
        tensors = (x, self.weight) if self.bias is None else (x, self.weight, self.bias)
        if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in tensors):
            return False
        needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        return x.dim() >= 2 and not needs_grad

    def forward(self, x: Tensor) -> Tensor:
        if not self.runs_packed(x):
            return F.linear(x, self.weight, self.bias)
        if self.weight._version != self.packed_version:
            self.pack()
        return ONEDNN.linear(x.contiguous(), self.packed, self.bias, "none", [], "")


# The smallest weight (in elements) worth packing: a oneDNN call costs 10-20 us more than
# MKL's, which a 128 x 128 product never wins back; 256 x 256 wins from about a hundred
# rows, 256 x 1024 and the output layers from a few (one thread, on the CPU of
# docs/benchmarks.md).
PACKED_MIN_WEIGHTS = 1 << 16


def packed_weights(model: Seq2Seq) -> Seq2Seq:
    """`model` with every linear layer of at least `PACKED_MIN_WEIGHTS` weights made a
    `PackedLinear` (in place), for decoding on the CPU; unchanged where PyTorch has no
    oneDNN."""
    if ONEDNN is None:
        return model
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.weight.numel() >= PACKED_MIN_WEIGHTS:
                setattr(parent, name, PackedLinear.of(child))
    return model


def int8_weights(model: Seq2Seq) -> Seq2Seq:
    """The model with the weights of its linear layers in int8, for decoding on the CPU
    (PyTorch's dynamic quantization: activations are quantized per batch on the fly).
    About twice as fast where matrix products dominate; the outputs move (docs/benchmarks.md
    compares BLEU), so it is never the default."""
    with warnings.catch_warnings():
        # torch.ao.quantization and its int8 tensors announce their move to torchao; torch
        # is pinned, and they work.
        warnings.filterwarnings("ignore", ".*(deprecated|torchao)", DeprecationWarning)
        warnings.filterwarnings("ignore", ".*deprecated", UserWarning)
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
