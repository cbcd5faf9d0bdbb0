"""The Transformer's blocks around its attention: the norm (`model.norm_type`), the
feed-forward layers (`model.ffn_activation`, gated or not) and the residual sublayer that
holds a norm before or after its sum (`model.norm`)."""

from __future__ import annotations

from torch import Tensor, nn

from seq2seq.config import ModelConfig
from seq2seq.models.dropout import Dropout

NORM_EPS = 1e-5  # LayerNorm's default, and RMSNorm's here (CTranslate2 reads one epsilon)
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}
GATED = {"swiglu": "silu", "geglu": "gelu"}  # a gated activation -> the activation it gates


def make_norm(cfg: ModelConfig) -> nn.Module:
    """A norm over the model's width: LayerNorm, or RMSNorm (a gain, no bias)."""
    if cfg.norm_type == "rmsnorm":
        return nn.RMSNorm(cfg.hidden_dim, eps=NORM_EPS)
    return nn.LayerNorm(cfg.hidden_dim, eps=NORM_EPS)


class Sublayer(nn.Module):
    """A residual block around a function, with `norm` before (pre) or after (post) the sum."""

    def __init__(self, norm: nn.Module, pre_norm: bool, dropout: float) -> None:
        super().__init__()
        self.norm = norm
        self.pre_norm = pre_norm
        self.dropout = Dropout(dropout)

    def function_input(self, x: Tensor) -> Tensor:
        """What the wrapped function reads: the normalised x (pre-norm) or x itself."""
        return self.norm(x) if self.pre_norm else x

    def add_output(self, x: Tensor, fx: Tensor) -> Tensor:
        """The residual sum x + dropout(f(x)), normalised afterwards under post-norm."""
        x = x + self.dropout(fx)
        return x if self.pre_norm else self.norm(x)


class Gated(nn.Module):
    """act(a) * b of the two halves [a, b] of its input's last dimension (a gated linear
    unit: the expanding layer computes xW and xV as one matrix)."""

    def __init__(self, activation: nn.Module) -> None:
        super().__init__()
        self.activation = activation

    def forward(self, x: Tensor) -> Tensor:
        gate, value = x.chunk(2, dim=-1)
        return self.activation(gate) * value


def gated_width(ff_dim: int) -> int:
    """A gated feed-forward's inner size: 2/3 of ff_dim, so that its three matrices hold
    the parameters of an ungated one's two."""
    return max(2 * ff_dim // 3, 1)


class FeedForward(nn.Sequential):
    """linear(dim -> inner), activation, dropout, linear(inner -> dim); gated (swiglu,
    geglu): the first linear makes both halves of a `Gated` unit, of inner `gated_width`.
    A `Sequential`, so that parameters keep the names checkpoints hold (feed_forward.0,
    feed_forward.3)."""

    def __init__(self, dim: int, inner: int, dropout: float, activation: str = "relu") -> None:
        if activation in GATED:
            inner = gated_width(inner)
            expand, act = nn.Linear(dim, 2 * inner), Gated(ACTIVATIONS[GATED[activation]]())
        else:
            expand, act = nn.Linear(dim, inner), ACTIVATIONS[activation]()
        super().__init__(expand, act, Dropout(dropout), nn.Linear(inner, dim))

    @property
    def expand(self) -> nn.Linear:
        return self[0]

    @property
    def contract(self) -> nn.Linear:
        return self[3]

    @property
    def gated(self) -> bool:
        return isinstance(self[1], Gated)
