"""The exact marginal over source positions of the RNN's hard attention.

The RNN reads its chosen position j at the prediction only (its recurrence reads the
expected context), so the next token's probability is a mixture over one step's positions
(Deng et al., 2018):

    p(y_t) = sum_j p_t(j) softmax(W_o tanh(W_c [h_t; v_j]))_y
    log p(y_t) = logsumexp_j (log p_t(j) + log_softmax(W_o a_tj)_y),  a_tj = tanh(W_c [h_t; v_j])

It costs S output layers per target token over (rows, steps, S, V) elements. The steps go
`CHUNK_ELEMENTS` at a time, and under autograd each chunk is recomputed in the backward
instead of kept (torch.utils.checkpoint, which replays its dropout masks), so training
holds what soft attention holds plus one chunk's elements, a few times over.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from seq2seq.attention.hard import safe_log

# Elements (rows x steps x positions x vocabulary) of the logits one chunk computes; at
# least one step a chunk, whatever its size.
CHUNK_ELEMENTS = 1 << 22

# (cell outputs (..., H), contexts (..., D)) -> logits (..., V)
Predict = Callable[[Tensor, Tensor], Tensor]


def marginal_log_probs(
    predict: Predict, outputs: Tensor, values: Tensor, p: Tensor, vocab: int
) -> Tensor:
    """log p(y_t) (R, T, V) of the mixture over positions: `outputs` h_t (R, T, H), `values`
    v_j (R, S, D) of each row's source, `p` (R, T, S) the position distributions, `vocab`
    the size V of `predict`'s logits."""
    rows, steps, positions = p.shape
    log_p = safe_log(p)

    def chunk(hidden: Tensor, log_prior: Tensor) -> Tensor:
        size = hidden.size(1)
        logits = predict(
            hidden.unsqueeze(2).expand(-1, -1, positions, -1),
            values.unsqueeze(1).expand(-1, size, -1, -1),
        )
        return torch.logsumexp(log_prior.unsqueeze(-1) + logits.log_softmax(-1), dim=2)

    per_chunk = max(1, CHUNK_ELEMENTS // max(1, rows * positions * vocab))
    parts = []
    for start in range(0, steps, per_chunk):
        part = (outputs[:, start : start + per_chunk], log_p[:, start : start + per_chunk])
        if torch.is_grad_enabled():
            parts.append(checkpoint(chunk, *part, use_reentrant=False))
        else:
            parts.append(chunk(*part))
    return torch.cat(parts, dim=1)
