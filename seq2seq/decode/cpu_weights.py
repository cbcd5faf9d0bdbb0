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
from seq2seq.models.recurrent import StepLSTM


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


class _PackedWeights:
    """What the packed layers share: when their inputs allow the packed path, and copies
    that pack their own (oneDNN's layout has no storage to copy or pickle)."""

    packed: object

    @staticmethod
    def for_inference(tensors: tuple[Tensor, ...]) -> bool:
        """All float32 on the CPU, and no gradient wanted through them."""
        if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in tensors):
            return False
        return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))

    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())  # type: ignore[misc]
        del state["packed"]
        state["packed_version"] = None
        return state


class PackedLinear(_PackedWeights, nn.Linear):
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

    def runs_packed(self, x: Tensor) -> bool:
        tensors = (x, self.weight) if self.bias is None else (x, self.weight, self.bias)
        return x.dim() >= 2 and self.for_inference(tensors)

    def forward(self, x: Tensor) -> Tensor:
        if not self.runs_packed(x):
            return F.linear(x, self.weight, self.bias)
        if self.weight._version != self.packed_version:
            self.pack()
        return ONEDNN.linear(x.contiguous(), self.packed, self.bias, "none", [], "")


class PackedLSTM(_PackedWeights, StepLSTM):
    """A `StepLSTM` whose single steps at inference (float32 on the CPU) run one oneDNN
    product per layer on the packed weights [W_ih | W_hh] and the summed biases:

        i, f, g, o = [x, h] [W_ih | W_hh]^T + b_ih + b_hh   (split in four)

    measured 1.4x faster than PyTorch's own LSTM on the Multi30k RNN's decoder (one
    thread), which reorders its weights for oneDNN at every call. Anything else takes
    `StepLSTM`'s path; weights changed in place are packed again, as in `PackedLinear`.
    """

    @classmethod
    def of(cls, lstm: nn.LSTM) -> PackedLSTM:
        """A packed LSTM sharing `lstm`'s parameters (unidirectional, no projection)."""
        layer = cls(
            lstm.input_size,
            lstm.hidden_size,
            lstm.num_layers,
            lstm.bias,
            lstm.batch_first,
            lstm.dropout,
            device="meta",
        )
        for name in lstm._flat_weights_names:
            setattr(layer, name, getattr(lstm, name))
        layer.train(lstm.training)
        layer.pack()
        return layer

    def _weights_version(self) -> tuple[int, ...]:
        return tuple(w._version for w in self._flat_weights)

    def pack(self) -> None:
        self.packed: list[tuple[Tensor, Tensor | None]] = []
        with torch.no_grad():
            for layer in range(self.num_layers):
                w_ih, w_hh = (
                    getattr(self, f"weight_ih_l{layer}"),
                    getattr(self, f"weight_hh_l{layer}"),
                )
                bias = None
                if self.bias:
                    bias = getattr(self, f"bias_ih_l{layer}") + getattr(self, f"bias_hh_l{layer}")
                self.packed.append((ONEDNN.pack(torch.cat([w_ih, w_hh], dim=1), None), bias))
        self.packed_version = self._weights_version()

    def runs_packed(self, x: object, state: object) -> bool:
        if not self.runs_steps(x, state):
            return False
        return self.for_inference((x, *state, *self._flat_weights))

    def forward(self, x, state=None):  # noqa: ANN001, ANN201 (nn.LSTM's signature)
        if not self.runs_packed(x, state):
            return super().forward(x, state)
        if self._weights_version() != self.packed_version:
            self.pack()
        return self.step(x, state, self._packed_gates)

    def _packed_gates(self, layer: int, inputs: Tensor, hidden: Tensor) -> Tensor:
        weight, bias = self.packed[layer]
        return ONEDNN.linear(torch.cat([inputs, hidden], dim=-1), weight, bias, "none", [], "")


# The smallest weight (in elements) worth packing: a oneDNN call costs 10-20 us more than
# MKL's, which a 128 x 128 product never wins back; 256 x 256 wins from about a hundred
# rows, 256 x 1024 and the output layers from a few (one thread, on the CPU of
# docs/benchmarks.md).
PACKED_MIN_WEIGHTS = 1 << 16
_LSTMS = (nn.LSTM, StepLSTM)


def packed_weights(model: Seq2Seq) -> Seq2Seq:
    """`model` with every linear layer of at least `PACKED_MIN_WEIGHTS` weights made a
    `PackedLinear` and every unidirectional LSTM (a decoder's) a `PackedLSTM` (in place),
    for decoding on the CPU; unchanged where PyTorch has no oneDNN."""
    if ONEDNN is None:
        return model
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.weight.numel() >= PACKED_MIN_WEIGHTS:
                setattr(parent, name, PackedLinear.of(child))
            elif type(child) in _LSTMS and not (child.bidirectional or child.proj_size):
                setattr(parent, name, PackedLSTM.of(child))
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
