"""The training set as batches: prepared corpora read one after another, pairs longer than
`data.max_len` left out, and each epoch's length-bucketed batches, reproducible from
(seed, epoch) for exact resumption. With subword sampling, each epoch reads the corpora in
one of their sampled segmentations (each prepared like the corpora themselves). A corpus's
tags (its target language's, its data.tags tag) are put before each of its sources as its
batches are built.

Nothing here holds a Python object per pair. A process holds, per kept pair, its 4-byte
place in the epoch's order (while the next epoch's is made: 4 more, 4 for the shuffle
and 2 for the sort key, read again each epoch); the piece ids stay in the prepared files,
and a batch's rows are read from them when it is built (from any thread: nothing here is
written but by `epoch`, before the epoch's batches are read). With `data.weights` an
epoch's order holds 4 bytes per pair of the epoch (some pairs twice, some not at all:
CorpusMixture), about 28 while it is drawn; `data.temperature` sets those weights from the
corpora's sizes (CorpusWeights).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

import numpy as np
import torch
from torch import Tensor

from seq2seq.data.alignments import gold_attention
from seq2seq.data.padded_batches import (
    Batch,
    ShapeKeys,
    batch_bounds,
    random_order,
    stable_sort,
)
from seq2seq.data.prepared_corpus import PreparedCorpus
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.errors import UserError

SCAN_CHUNK = 1 << 16  # pairs whose lengths are read at a time


class TrainingPairs:
    """The pairs of several prepared corpora, numbered one corpus after another; a corpus
    with tags (`tags`, the piece ids of each corpus's) has them before each source."""

    def __init__(self, corpora: list[PreparedCorpus], tags: Sequence[Sequence[int]] = ()) -> None:
        self.corpora = corpora
        self.tags = [list(ids) for ids in tags] or [[] for _ in corpora]
        self.starts = np.cumsum([0, *(corpus.pairs for corpus in corpora)])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _added(self, number: int, side: str) -> int:
        """The pieces a side of corpus `number` has before its own: its tags'."""
        return len(self.tags[number]) if side == "src" else 0

    def longest(self, side: str) -> int:
        return max(
            corpus.manifest["longest"][side] + self._added(number, side)
            for number, corpus in enumerate(self.corpora)
        )

    def length_chunks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(first pair, source lengths, target lengths) of every pair, a chunk at a time."""
        for number, corpus in enumerate(self.corpora):
            base = int(self.starts[number])
            for start in range(0, corpus.pairs, SCAN_CHUNK):
                stop = min(start + SCAN_CHUNK, corpus.pairs)
                src = corpus.src.lengths(start, stop) + self._added(number, "src")
                yield base + start, src, corpus.tgt.lengths(start, stop)

    def _parts(self, indices: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(corpus number, which of `indices`, their positions in it), per corpus they hit."""
        if len(self.corpora) == 1:
            yield 0, np.ones(len(indices), bool), indices
            return
        part = np.searchsorted(self.starts, indices, side="right") - 1
        for number in np.unique(part).tolist():
            chosen = part == number
            yield number, chosen, indices[chosen] - self.starts[number]

    def lengths_at(self, side: str, indices: np.ndarray) -> np.ndarray:
        lengths = np.empty(len(indices), np.int64)
        for number, chosen, local in self._parts(indices):
            found = self.corpora[number].sides[side].lengths_at(local)
            lengths[chosen] = found + self._added(number, side)
        return lengths

    def padded(self, side: str, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ids of the pairs at `indices` as the rows of a (pairs, longest + 1) int64
        array (a source's tags first, where its corpus has some), PAD after each row's ids
        (room for one more token); and their lengths."""
        rows: list[np.ndarray] = [np.zeros(0)] * len(indices)
        added = np.zeros(len(indices), np.int64)
        parts = list(self._parts(indices))
        for number, chosen, local in parts:
            read = self.corpora[number].sides[side].rows(local)
            for slot, row in zip(np.flatnonzero(chosen).tolist(), read, strict=True):
                rows[slot] = row
            added[chosen] = self._added(number, side)
        lengths = np.fromiter(map(len, rows), np.int64, count=len(rows)) + added
        padded = np.full((len(rows), int(lengths.max()) + 1), PAD_ID, np.int64)
        for number, chosen, _ in parts:
            if self._added(number, side):
                padded[chosen, : self._added(number, side)] = self.tags[number]
        for slot, (row, start) in enumerate(zip(rows, added.tolist(), strict=True)):
            padded[slot, start : start + len(row)] = row
        return padded, lengths

    def gold_attention(self, indices: np.ndarray, shape: tuple[int, int, int]) -> Tensor | None:
        """The gold attention (B, T, S) of a batch of `shape` of the pairs at `indices`
        (alignments.gold_attention), where a corpus has alignments; else None."""
        if all(corpus.alignment is None for corpus in self.corpora):
            return None
        links: list[np.ndarray | None] = [None] * len(indices)
        shifts = np.zeros(len(indices), np.int64)
        for number, chosen, local in self._parts(indices):
            found = self.corpora[number].links(local)
            if found is not None:
                for slot, row in zip(np.flatnonzero(chosen).tolist(), found, strict=True):
                    links[slot] = row
                shifts[chosen] = self._added(number, "src")
        return torch.from_numpy(gold_attention(links, shifts, shape))


class KeptPairs:
    """Which pairs the length filter kept, held as the (usually few) it dropped: maps the
    n-th kept pair to its number among all pairs."""

    def __init__(self, dropped: np.ndarray) -> None:
        # The kept pairs before each dropped one: a kept pair is shifted by the dropped
        # pairs whose count of kept pairs before them is at most its own number.
        self.kept_before = dropped - np.arange(len(dropped))

    def pair(self, kept: np.ndarray) -> np.ndarray:
        return kept + np.searchsorted(self.kept_before, kept, side="right")


class CorpusShare(NamedTuple):
    """What an epoch holds of one corpus's kept pairs (numbered `first` on)."""

    first: int
    pairs: int
    copies: int  # every pair this many times
    drawn: int  # then this many of them, drawn anew each epoch, once more


@dataclass(frozen=True)
class CorpusWeights:
    """How often an epoch holds each corpus's pairs: `weights` (data.weights, 1 each where
    None), then sampling by `temperature` (data.temperature)."""

    weights: Sequence[float] | None = None
    temperature: float | None = None

    def of(self, kept: np.ndarray) -> list[float] | None:
        """The weight of each corpus, of `kept` pairs each (None: every pair once). With a
        temperature T, of sizes m_i = w_i n_i: corpus i's share of an epoch of sum(m) pairs
        is p_i = m_i^(1/T) / sum_j m_j^(1/T), so its weight is p_i sum(m) / n_i."""
        if self.temperature is None or self.temperature == 1:  # at 1, p_i sum(m) = m_i: w_i
            return None if self.weights is None else list(self.weights)
        given = np.ones(len(kept)) if self.weights is None else np.asarray(self.weights, float)
        sizes = given * kept
        shares = sizes ** (1 / self.temperature)
        pairs = shares / shares.sum() * sizes.sum()
        # a corpus with no pair kept has nothing to weigh: 1
        return np.divide(pairs, kept, out=np.ones(len(kept)), where=kept > 0).tolist()


class CorpusMixture:
    """Which kept pairs an epoch holds under `data.weights`: of a corpus of weight w, each
    pair floor(w) times, then round((w - floor(w)) x its pairs) of them once more, drawn
    anew each epoch (at least one where w < 1, so that no corpus is silently left out)."""

    def __init__(self, kept_per_corpus: np.ndarray, weights: Sequence[float]) -> None:
        counts = kept_per_corpus.tolist()
        starts = np.cumsum([0, *counts])[:-1].tolist()
        self.shares = []
        for first, pairs, weight in zip(starts, counts, weights, strict=True):
            copies, share = divmod(weight, 1)
            drawn = min(pairs, max(round(share * pairs), int(copies == 0))) if share else 0
            self.shares.append(CorpusShare(int(first), pairs, int(copies), drawn))
        self.pairs = sum(share.pairs * share.copies + share.drawn for share in self.shares)
        # int32 where the pair numbers and the epoch's places fit: half the memory
        self.dtype = np.int32 if max(self.pairs, sum(counts)) < 2**31 else np.int64

    def members(self, generator: torch.Generator) -> np.ndarray:
        """The kept-pair numbers of an epoch, a corpus after another, with repeats."""
        parts = [np.zeros(0, self.dtype)]
        for first, pairs, copies, drawn in self.shares:
            parts += [np.arange(first, first + pairs, dtype=self.dtype)] * copies
            if drawn:
                chosen = random_order(pairs, generator)[:drawn].astype(self.dtype)
                parts.append(chosen + self.dtype(first))
        return np.concatenate(parts)


class EpochBatches(Sequence):
    """An epoch's batches, in training order: each a list of kept-pair numbers."""

    def __init__(self, order: np.ndarray, bounds: np.ndarray, batch_order: np.ndarray) -> None:
        self.order, self.bounds, self.batch_order = order, bounds, batch_order

    def __len__(self) -> int:
        return len(self.batch_order)

    @overload
    def __getitem__(self, i: int) -> list[int]: ...

    @overload
    def __getitem__(self, i: slice) -> list[list[int]]: ...

    def __getitem__(self, i: int | slice) -> list[int] | list[list[int]]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        batch = int(self.batch_order[i])
        return self.order[self.bounds[batch] : self.bounds[batch + 1]].tolist()


class TrainBatches:
    """Training batches of one epoch, reproducible from (seed, epoch) for exact resumption.

    Batches are lists of numbers of the kept pairs (0 .. len - 1), as the trainer passes
    them back to `target_tokens` and `batch`."""

    def __init__(
        self,
        pairs: TrainingPairs,
        max_len: int,
        batch_tokens: int,
        seed: int,
        weights: CorpusWeights | None = None,
        samples: Sequence[TrainingPairs] = (),
        max_ratio: float | None = None,
    ) -> None:
        if batch_tokens < 1:
            raise ValueError(f"batch_tokens must be positive, got {batch_tokens}")
        self.max_len, self.batch_tokens, self.seed = max_len, batch_tokens, seed
        self.weights = weights or CorpusWeights()
        self.samples, self.max_ratio = list(samples), max_ratio
        self._count(pairs)

    def _count(self, pairs: TrainingPairs) -> None:
        """Read which of `pairs` fit data.max_len (and data.max_len_ratio), and the widths
        their batches are cut by: what an epoch's batches are made from."""
        self.pairs = pairs
        longest = [min(self.max_len, pairs.longest(side)) for side in ("src", "tgt")]
        self.shape = ShapeKeys(*longest)
        widths = np.zeros(max(longest) + 2, np.int64)
        dropped, self.tokens = [], np.zeros(2, np.int64)
        kept_per_corpus = np.zeros(len(pairs.corpora), np.int64)
        self.uneven = 0  # pairs that fit data.max_len but not data.max_len_ratio
        for start, fits, uneven, src, tgt in self._kept_lengths():
            dropped.append(np.flatnonzero(~fits) + start)
            self.uneven += uneven
            widths += np.bincount(np.maximum(src, tgt) + 1, minlength=len(widths))
            self.tokens += (src.sum(), tgt.sum())
            kept_per_corpus[np.searchsorted(pairs.starts, start, side="right") - 1] += len(src)
        self.kept = KeptPairs(np.concatenate([np.zeros(0, np.int64), *dropped]))
        self.kept_count = int(kept_per_corpus.sum())
        self.too_long = len(pairs) - self.kept_count - self.uneven
        self.bounds = batch_bounds(widths, self.batch_tokens)
        self.mixture: CorpusMixture | None = None  # every pair once an epoch
        weights = self.weights.of(kept_per_corpus)
        if weights is not None and set(weights) != {1}:
            self.mixture = CorpusMixture(kept_per_corpus, weights)
        self.epoch_pairs = self.kept_count if self.mixture is None else self.mixture.pairs

    def _kept_lengths(self) -> Iterator[tuple[int, np.ndarray, int, np.ndarray, np.ndarray]]:
        """(first pair, which pairs are kept, how many of the others only their length ratio
        drops, the kept pairs' source and target lengths) of every pair, a chunk at a time:
        a pair is kept where both sides have at most data.max_len pieces and, with
        `max_ratio`, the longer at most that many times the pieces of the shorter."""
        for start, src, tgt in self.pairs.length_chunks():
            fits = (src <= self.max_len) & (tgt <= self.max_len)
            uneven = 0
            if self.max_ratio is not None:
                even = np.maximum(src, tgt) <= self.max_ratio * np.minimum(src, tgt)
                uneven, fits = int((fits & ~even).sum()), fits & even
            yield start, fits, uneven, src[fits], tgt[fits]

    def sort_keys(self) -> np.ndarray:
        """Each kept pair's sort key (see batching.ShapeKeys), read again for each epoch
        rather than held between them: 2 bytes a pair for the time of the sort only."""
        ranked = self.shape.table is not None
        keys = np.empty(len(self), self.shape.table.dtype if ranked else np.int64)
        filled = 0
        for _, _, _, src, tgt in self._kept_lengths():
            keys[filled : filled + len(src)] = self.shape(src, tgt)
            filled += len(src)
        return keys

    def __len__(self) -> int:
        return self.kept_count

    @property
    def length_ratio(self) -> float:
        """Source pieces per target piece over the kept pairs."""
        return int(self.tokens[0]) / max(int(self.tokens[1]), 1)

    def epoch(self, epoch: int) -> EpochBatches:
        """Batch index lists of an epoch; the same (seed, epoch) always gives the same list.
        With `samples` (subword sampling), epoch e's pairs are sample e mod their number,
        and its batches are read from it until the next call."""
        if self.samples and self.pairs is not self.samples[epoch % len(self.samples)]:
            self._count(self.samples[epoch % len(self.samples)])
            if not len(self):
                ratio = "" if self.max_ratio is None else f" and a ratio of {self.max_ratio:g}"
                raise UserError(
                    f"sampled segmentation {epoch % len(self.samples)} has no training pair "
                    f"of at most {self.max_len} pieces{ratio}; raise data.max_len"
                )
        generator = torch.Generator()
        # A fresh generator per epoch, so a resumed run regenerates the epoch and skips ahead.
        # Kept in [0, 2**63) because manual_seed rejects values outside 64 bits.
        generator.manual_seed((self.seed * 1_000_003 + epoch) % 2**63)
        count = self.shape.count if self.shape.table is not None else None
        if self.mixture is None:
            order = stable_sort(random_order(len(self), generator), self.sort_keys(), count)
            bounds = self.bounds
        else:  # the epoch's own pairs, some of them more than once: sorted by their keys
            members = self.mixture.members(generator)
            members = members[random_order(len(members), generator)]
            keys = self.sort_keys()[members]
            places = np.arange(len(members), dtype=members.dtype)
            order = members[stable_sort(places, keys, count)]
            bounds = batch_bounds(self.shape.width_counts(keys), self.batch_tokens)
        return EpochBatches(order, bounds, random_order(len(bounds) - 1, generator))

    def target_tokens(self, indices: list[int]) -> int:
        """Target tokens (+ EOS) of a batch: the loss normaliser, known without building it."""
        pairs = self.kept.pair(np.asarray(indices, np.int64))
        return int(self.pairs.lengths_at("tgt", pairs).sum()) + len(pairs)

    def batch(self, indices: list[int]) -> Batch:
        """The padded batch of these kept pairs, its rows read from the prepared files."""
        if not len(indices):
            raise ValueError("a batch needs at least one pair")
        pairs = self.kept.pair(np.asarray(indices, np.int64))
        every = np.arange(len(pairs))
        src, src_lengths = self.pairs.padded("src", pairs)
        src[every, src_lengths] = EOS_ID
        tgt_out, tgt_lengths = self.pairs.padded("tgt", pairs)
        tgt_in = np.empty_like(tgt_out)
        tgt_in[:, 0], tgt_in[:, 1:] = BOS_ID, tgt_out[:, :-1]
        tgt_out[every, tgt_lengths] = EOS_ID
        return Batch(
            src=torch.from_numpy(src),
            src_lengths=torch.from_numpy(src_lengths + 1),
            tgt_in=torch.from_numpy(tgt_in),
            tgt_out=torch.from_numpy(tgt_out),
            indices=list(indices),
            n_src_tokens=int(src_lengths.sum()) + len(pairs),
            n_tgt_tokens=int(tgt_lengths.sum()) + len(pairs),
            alignment=self.pairs.gold_attention(
                pairs, (len(pairs), tgt_out.shape[1], src.shape[1])
            ),
        )
