"""Padded batches and token-budget batching over length-sorted examples.

A batch costs `sentences x longer padded side` tokens (source + EOS, target + BOS/EOS),
which is what the padded tensors hold; sorting by that length keeps padding small.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    """Right-padded id tensors of a batch; `indices` are the examples' corpus positions."""

    src: Tensor  # (B, S) source ids + EOS
    src_lengths: Tensor  # (B,) including the EOS
    tgt_in: Tensor | None  # (B, T) BOS + target ids
    tgt_out: Tensor | None  # (B, T) target ids + EOS
    indices: list[int]
    n_src_tokens: int
    n_tgt_tokens: int

    def __len__(self) -> int:
        return self.src.size(0)

    @property
    def src_mask(self) -> Tensor:
        """(B, 1, S): True at the real source positions, EOS included."""
        return padding_mask(self.src_lengths, self.src.size(1))

    def to(self, device: torch.device | str) -> Batch:
        # non_blocking only overlaps anything when the source is pinned; it is harmless otherwise.
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        return replace(
            self,
            src=move(self.src),
            src_lengths=move(self.src_lengths),
            tgt_in=move(self.tgt_in),
            tgt_out=move(self.tgt_out),
        )


def padding_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """(B, 1, T) mask, True at the first `lengths[b]` positions of each row."""
    max_len = int(lengths.max()) if max_len is None else max_len
    steps = torch.arange(max_len, device=lengths.device)
    return (steps[None, :] < lengths[:, None]).unsqueeze(1)


def _pad(rows: list[list[int]]) -> Tensor:
    # Padding in Python and converting once is several times faster than filling per row.
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows], dtype=torch.long)


def make_batch(src: list[list[int]], tgt: list[list[int]] | None, indices: list[int]) -> Batch:
    """Pad source ids + EOS and, when given, BOS + target / target + EOS."""
    if not src or len(src) != len(indices) or (tgt is not None and len(tgt) != len(src)):
        raise ValueError(
            "make_batch needs a non-empty batch with one index (and target) per source"
        )
    src_rows = [[*ids, EOS_ID] for ids in src]
    src_lengths = torch.tensor([len(r) for r in src_rows], dtype=torch.long)
    tgt_in = tgt_out = None
    n_tgt = 0
    if tgt is not None:
        tgt_in = _pad([[BOS_ID, *ids] for ids in tgt])
        tgt_out = _pad([[*ids, EOS_ID] for ids in tgt])
        n_tgt = sum(len(ids) + 1 for ids in tgt)
    return Batch(
        src=_pad(src_rows),
        src_lengths=src_lengths,
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        indices=list(indices),
        n_src_tokens=int(src_lengths.sum()),
        n_tgt_tokens=n_tgt,
    )


def token_batches(
    src_lengths: list[int],
    tgt_lengths: list[int] | None,
    batch_tokens: int,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Group example indices into batches of at most `batch_tokens` padded tokens.

    Without a generator the result is deterministic and in length order (for decoding).
    With one, equal lengths are ordered randomly and the batch order is shuffled.
    """
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be positive, got {batch_tokens}")
    n = len(src_lengths)
    if tgt_lengths is not None and len(tgt_lengths) != n:
        raise ValueError(f"{n} source lengths but {len(tgt_lengths)} target lengths")
    # Padded width of each example: source + EOS; target + BOS (tgt_in) or + EOS (tgt_out).
    if tgt_lengths is None:
        sizes = [s + 1 for s in src_lengths]
        keys = sizes
    else:
        sizes = [max(s, t) + 1 for s, t in zip(src_lengths, tgt_lengths, strict=True)]
        # Secondary keys group equal source and target lengths, so both sides pad little.
        keys = list(zip(sizes, src_lengths, tgt_lengths, strict=True))
    order = list(range(n)) if generator is None else torch.randperm(n, generator=generator).tolist()
    order.sort(key=keys.__getitem__)  # stable: ties keep the (random) permutation order

    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for index in order:
        new_width = max(width, sizes[index])
        if current and (len(current) + 1) * new_width > batch_tokens:
            batches.append(current)
            current, new_width = [], sizes[index]
        current.append(index)
        width = new_width
    if current:
        batches.append(current)

    if generator is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return batches


class TrainBatches:
    """Training batches of one epoch, reproducible from (seed, epoch) for exact resumption."""

    def __init__(
        self, src: list[list[int]], tgt: list[list[int]], batch_tokens: int, seed: int
    ) -> None:
        if len(src) != len(tgt):
            raise ValueError(f"{len(src)} source but {len(tgt)} target examples")
        self.src = src
        self.tgt = tgt
        self.batch_tokens = batch_tokens
        self.seed = seed
        self._src_lengths = [len(ids) for ids in src]
        self._tgt_lengths = [len(ids) for ids in tgt]

    def __len__(self) -> int:
        return len(self.src)

    def epoch(self, epoch: int) -> list[list[int]]:
        """Batch index lists of an epoch; the same (seed, epoch) always gives the same list."""
        generator = torch.Generator()
        # A fresh generator per epoch, so a resumed run regenerates the epoch and skips ahead.
        # Kept in [0, 2**63) because manual_seed rejects values outside 64 bits.
        generator.manual_seed((self.seed * 1_000_003 + epoch) % 2**63)
        return token_batches(self._src_lengths, self._tgt_lengths, self.batch_tokens, generator)

    def target_tokens(self, indices: list[int]) -> int:
        """Target tokens (+ EOS) of a batch: the loss normaliser, known without building it."""
        return sum(self._tgt_lengths[i] + 1 for i in indices)

    def batch(self, indices: list[int]) -> Batch:
        return make_batch([self.src[i] for i in indices], [self.tgt[i] for i in indices], indices)
