"""An LSTM whose single time steps on the CPU (a decoder's) are written out.

PyTorch's LSTM hands every call on the CPU to oneDNN, which reorders the weights into its
own layout at every call, in the forward pass and again in the backward; a decoder calls
it once per target token. Written out, a step is two products per layer on the weights
as they are,

    i, f, g, o = x W_ih^T + b_ih + h W_hh^T + b_hh   (split in four)
    c' = sigmoid(f) c + sigmoid(i) tanh(g),   h' = sigmoid(o) tanh(c')

which took the Multi30k RNN recipe's training from 1.17x to 1.38x of the speed before
issue 33 (docs/benchmarks.md). Equal to `nn.LSTM` up to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# (layer, its input (B, I), its hidden state (B, H)) -> its gates (B, 4H)
LayerGates = Callable[[int, Tensor, Tensor], Tensor]


def lstm_cell(gates: Tensor, cell: Tensor) -> tuple[Tensor, Tensor]:
    """The gates (B, 4H) of a step and the cell state c (B, H) -> (h', c')."""
    i, f, g, o = gates.chunk(4, dim=-1)
    cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(cell), cell


class StepLSTM(nn.LSTM):
    """`nn.LSTM` (same parameters, same sequences) with its one-step calls on the CPU
    written out, in training and at inference alike. Anything else (sequences, packed
    ones, dropout between layers in training, other devices, projections, both
    directions) takes `nn.LSTM`'s own path."""

    def runs_steps(self, x: object, state: object) -> bool:
        if not isinstance(x, Tensor) or not isinstance(state, tuple) or x.dim() != 3:
            return False
        dropping = self.training and self.dropout > 0 and self.num_layers > 1
        one_step = x.size(1 if self.batch_first else 0) == 1
        plain = not self.bidirectional and not self.proj_size and x.device.type == "cpu"
        return one_step and plain and not dropping

    def forward(self, x, state=None):  # noqa: ANN001, ANN201 (nn.LSTM's signature)
        if not self.runs_steps(x, state):
            return super().forward(x, state)
        return self.step(x, state, self.layer_gates)

    def layer_gates(self, layer: int, inputs: Tensor, hidden: Tensor) -> Tensor:
        w_ih, w_hh = getattr(self, f"weight_ih_l{layer}"), getattr(self, f"weight_hh_l{layer}")
        b_ih = getattr(self, f"bias_ih_l{layer}") if self.bias else None
        b_hh = getattr(self, f"bias_hh_l{layer}") if self.bias else None
        return F.linear(inputs, w_ih, b_ih) + F.linear(hidden, w_hh, b_hh)

    def step(
        self, x: Tensor, state: tuple[Tensor, Tensor], layer_gates: LayerGates
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """One time step of x (one step long) from state (h, c), each (layers, B, H), with
        each layer's gates from `layer_gates` -> (output, (h', c')), as `nn.LSTM`."""
        time = 1 if self.batch_first else 0
        inputs, (hidden, cell) = x.squeeze(time), state
        new_hidden, new_cell = [], []
        for layer in range(self.num_layers):
            inputs, layer_cell = lstm_cell(layer_gates(layer, inputs, hidden[layer]), cell[layer])
            new_hidden.append(inputs)
            new_cell.append(layer_cell)
        return inputs.unsqueeze(time), (torch.stack(new_hidden), torch.stack(new_cell))
