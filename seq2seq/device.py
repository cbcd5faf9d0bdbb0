"""Which device a run or a translator computes on."""

from __future__ import annotations

import torch

from seq2seq.errors import UserError


def pick_device(name: str = "auto") -> torch.device:
    """`auto` (CUDA when available, else the CPU), `cpu` or `cuda`."""
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("train.device is cuda but no CUDA device is available; use auto or cpu")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)
