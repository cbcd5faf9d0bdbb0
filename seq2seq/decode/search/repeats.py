"""Repetition blocking: no n-gram of an output may occur in it twice.

A row whose history y_1 .. y_t ends in the n - 1 tokens y_{i} .. y_{i+n-2} of an earlier
window may not continue with y_{i+n-1}, the token that followed them there:

    banned(t) = { y_{i+n-1} : y_{i..i+n-2} = y_{t-n+2..t}, 1 <= i <= t - n + 1 }

(n = 1: every token already in the output). The histories stay on the device and the test
is a comparison of every window with the row's last n - 1 tokens, so a step reads nothing
back to the host.
"""

from __future__ import annotations

import torch
from torch import Tensor


def block_repeats_(log_probs: Tensor, history: Tensor, n: int) -> Tensor:
    """`log_probs` (rows, V) with -inf at each row's banned tokens (see the module), in place;
    `history` (rows, t) holds each row's output so far, BOS excluded."""
    if history.size(1) < n:  # no complete n-gram yet
        return log_probs
    windows = history.unfold(1, n, 1)  # (rows, t - n + 1, n)
    suffix = history[:, history.size(1) - n + 1 :].unsqueeze(1)  # (rows, 1, n - 1)
    repeats = (windows[..., :-1] == suffix).all(-1)  # (rows, t - n + 1); n = 1: all True
    banned = torch.zeros_like(log_probs).scatter_add_(1, windows[..., -1], repeats.float())
    return log_probs.masked_fill_(banned > 0, float("-inf"))
