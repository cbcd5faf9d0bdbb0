"""Padded batches and token-budget batching over length-sorted examples.

A batch costs `sentences x longer padded side` tokens (source + EOS, target + BOS/EOS),
which is what the padded tensors hold; sorting by that length keeps padding small.

The sort and the batching work on numpy arrays of lengths, with no Python object per
example: a training corpus of tens of millions of pairs is batched in seconds, in a few
bytes per pair (see epoch_batches.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
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
    # (B, T, S) each target position's gold attention over the source (guided alignment:
    # data.alignments); None without
    alignment: Tensor | None = None

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
            alignment=move(self.alignment),
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


# The (source, target) length grid is ranked as a table while it has at most this many
# cells; beyond it (sentences of thousands of pieces) the keys are the lengths themselves.
GRID_CELLS = 1 << 22
# Examples sorted per pass of the counting sort: bounds its scratch memory.
SORT_CHUNK = 1 << 16


def padded_widths(src: np.ndarray, tgt: np.ndarray | None) -> np.ndarray:
    """Each example's padded width: source + EOS, or the longer of it and target + BOS/EOS."""
    longer = src if tgt is None else np.maximum(src, tgt)
    return longer.astype(np.int64) + 1


class ShapeKeys:
    """Sort keys of examples by (padded width, source length, target length): equal keys
    for equal lengths, so that a stable sort by key is the sort by that triple. Small
    dense ranks from a table of the length grid where it fits (a counting sort then
    needs no scratch memory per example), else an exact composite of the three."""

    def __init__(self, src_max: int, tgt_max: int | None) -> None:
        self.src_cells = src_max + 1
        self.tgt_cells = 1 if tgt_max is None else tgt_max + 1
        cells = self.src_cells * self.tgt_cells
        self.table: np.ndarray | None = None
        if cells <= GRID_CELLS:
            src, tgt = np.divmod(np.arange(cells), self.tgt_cells)
            ranked = np.lexsort((tgt, src, np.maximum(src, tgt)))
            dtype = np.uint16 if cells <= 1 << 16 else np.uint32
            self.table = np.empty(cells, dtype)
            self.table[ranked] = np.arange(cells, dtype=dtype)
        self.count = cells  # keys lie in [0, count) when ranked

    def width_counts(self, keys: np.ndarray) -> np.ndarray:
        """How many of the examples with these keys have each padded width (see
        `padded_widths`): `batch_bounds`'s input, counted per key, not per example."""
        if self.table is None:
            return np.bincount(keys // (self.src_cells * self.tgt_cells))
        src, tgt = np.divmod(np.arange(self.count), self.tgt_cells)
        width_of_rank = np.empty(self.count, np.int64)
        width_of_rank[self.table] = np.maximum(src, tgt) + 1
        per_key = np.bincount(keys, minlength=self.count)
        return np.bincount(width_of_rank, weights=per_key).astype(np.int64)

    def __call__(self, src: np.ndarray, tgt: np.ndarray | None) -> np.ndarray:
        src = src.astype(np.int64)
        tgt = np.zeros_like(src) if tgt is None else tgt.astype(np.int64)
        if self.table is not None:
            return self.table[src * self.tgt_cells + tgt]
        width = np.maximum(src, tgt) + 1
        return (width * self.src_cells + src) * self.tgt_cells + tgt


def stable_sort(items: np.ndarray, keys: np.ndarray, count: int | None) -> np.ndarray:
    """`items` (example indices) stably sorted by `keys[item]`: equal keys keep the order
    they have in `items`. With `count` (keys are ranks below it) a counting sort in chunks
    writes the result in place of scratch memory; without, numpy's stable argsort."""
    if count is None:
        return items[np.argsort(keys[items], kind="stable")]
    sorted_items = np.empty_like(items)
    # Where each key's run starts in the result; advanced past what each chunk placed.
    free = np.cumsum(np.bincount(keys, minlength=count)) - np.bincount(keys, minlength=count)
    for start in range(0, len(items), SORT_CHUNK):
        chunk = items[start : start + SORT_CHUNK]
        chunk_keys = keys[chunk]
        by_key = np.argsort(chunk_keys, kind="stable")
        placed_keys = chunk_keys[by_key]
        rank_in_key = np.arange(len(chunk)) - np.searchsorted(placed_keys, placed_keys)
        sorted_items[free[placed_keys] + rank_in_key] = chunk[by_key]
        free += np.bincount(chunk_keys, minlength=count)
    return sorted_items


def batch_bounds(width_counts: np.ndarray, batch_tokens: int) -> np.ndarray:
    """Where each batch starts in the length-sorted order, and the end: greedy batches of at
    most `batch_tokens` padded tokens (a wider example alone in its batch), for
    `width_counts[w]` examples of padded width w. Walks the widths, not the examples."""
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be positive, got {batch_tokens}")
    starts, position, filled = [], 0, 0  # filled: examples in the batch still open
    for width in np.flatnonzero(width_counts).tolist():
        count, room = int(width_counts[width]), max(batch_tokens // width, 1)
        if 0 < filled < room:  # the open batch takes what fits at the new width
            taken = min(count, room - filled)
            position, count, filled = position + taken, count - taken, filled + taken
        if count:  # the rest opens new batches of `room` examples each
            starts.append(np.arange(position, position + count, room))
            position += count
            filled = count - (len(starts[-1]) - 1) * room
    return np.concatenate([*starts, [position]]).astype(np.int64)


def random_order(n: int, generator: torch.Generator) -> np.ndarray:
    """A permutation of range(n) from `generator`: torch's randperm, as batching always drew
    it (int32 where it fits: the same values in half the memory)."""
    dtype = torch.int32 if n < 2**31 else torch.int64
    return torch.randperm(n, generator=generator, dtype=dtype).numpy()


def token_batches(
    src_lengths: list[int] | np.ndarray,
    tgt_lengths: list[int] | np.ndarray | None,
    batch_tokens: int,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Group example indices into batches of at most `batch_tokens` padded tokens.

    Without a generator the result is deterministic and in length order (for decoding).
    With one, equal lengths are ordered randomly and the batch order is shuffled.
    """
    src = np.asarray(src_lengths, dtype=np.int64)
    tgt = None if tgt_lengths is None else np.asarray(tgt_lengths, dtype=np.int64)
    if tgt is not None and len(tgt) != len(src):
        raise ValueError(f"{len(src)} source lengths but {len(tgt)} target lengths")
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be positive, got {batch_tokens}")
    if not len(src):
        return []
    shape = ShapeKeys(int(src.max()), None if tgt is None else int(tgt.max()))
    keys = shape(src, tgt)
    first = np.arange(len(src)) if generator is None else random_order(len(src), generator)
    order = stable_sort(first, keys, shape.count if shape.table is not None else None)
    bounds = batch_bounds(np.bincount(padded_widths(src, tgt)), batch_tokens)
    batches = [order[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    if generator is not None:
        batches = [batches[i] for i in random_order(len(batches), generator).tolist()]
    return batches
