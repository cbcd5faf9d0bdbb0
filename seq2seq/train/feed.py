"""The batches of an epoch, made ready for the updates that train on them.

A batch is built on the CPU (this rank's shard, padded), then copied to the device. On a
GPU it is built into pinned memory and copied without waiting; since an update never
waits for the device either (train/update.py), the host builds the next batch while the
device still computes the last update: the batches are ready ahead with no thread, whose
Python would contend with the training loop for the interpreter lock. With `shapes`
every batch is padded further, to a few fixed shapes (rows and lengths rounded up), so
that each shape's update can be captured once as a CUDA graph.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from seq2seq.data.epoch_batches import TrainBatches
from seq2seq.data.padded_batches import Batch
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.train.distributed import World

# Padded shapes under CUDA graphs: lengths to multiples of 8 and rows to multiples of 16
# give the Multi30k recipe 29 shapes over 3 epochs for 27% more padded tokens.
LENGTH_MULTIPLE = 8
ROW_MULTIPLE = 16


@dataclass
class PreparedBatch:
    indices: list[int]  # the global batch, in corpus positions
    tokens: int  # its target tokens (+ EOS): the loss normaliser of every rank
    weight: float  # 1.0; 0.0 on a rank the batch has no sentence for (it joins with one)
    batch: Batch  # this rank's shard, padded, on the device


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def pad_to_shape(batch: Batch) -> Batch:
    """`batch` padded to rows and lengths rounded up (ROW_MULTIPLE, LENGTH_MULTIPLE). The
    rows added are one EOS long with no target, so that they change neither the loss nor
    any gradient, and no attention row is empty."""
    rows, src_len = batch.src.shape
    tgt_len = batch.tgt_in.size(1)
    extra_rows = round_up(rows, ROW_MULTIPLE) - rows
    src_len2, tgt_len2 = round_up(src_len, LENGTH_MULTIPLE), round_up(tgt_len, LENGTH_MULTIPLE)

    def padded(t: torch.Tensor, length: int) -> torch.Tensor:
        return F.pad(t, (0, length - t.size(1), 0, extra_rows), value=PAD_ID)

    src = padded(batch.src, src_len2)
    src[rows:, 0] = EOS_ID
    tgt_in = padded(batch.tgt_in, tgt_len2)
    tgt_in[rows:, 0] = BOS_ID
    lengths = F.pad(batch.src_lengths, (0, extra_rows), value=1)
    return replace(
        batch, src=src, src_lengths=lengths, tgt_in=tgt_in, tgt_out=padded(batch.tgt_out, tgt_len2)
    )


class BatchFeed:
    """Prepared batches of a list of global batches, for this rank on `device`."""

    def __init__(
        self, data: TrainBatches, world: World, device: torch.device, shapes: bool
    ) -> None:
        self.data, self.world, self.device, self.shapes = data, world, device, shapes
        self.pin = device.type == "cuda"  # a copy from pinned memory does not wait

    def prepare(self, indices: list[int]) -> PreparedBatch:
        """The batch of `indices`, on the device (its copy possibly still in flight)."""
        shard, weight = self.world.shard(indices), 1.0
        if not shard:  # fewer sentences than ranks: join the gradient exchange with nothing
            shard, weight = indices[:1], 0.0
        batch = self.data.batch(shard)
        if self.shapes:
            batch = pad_to_shape(batch)
        if self.pin:
            batch = replace(
                batch,
                src=batch.src.pin_memory(),
                src_lengths=batch.src_lengths.pin_memory(),
                tgt_in=batch.tgt_in.pin_memory(),
                tgt_out=batch.tgt_out.pin_memory(),
            )
        tokens = self.data.target_tokens(indices)
        return PreparedBatch(indices, tokens, weight, batch.to(self.device))

    def updates(
        self, batches: list[list[int]], start: int, per_update: int
    ) -> Iterator[list[PreparedBatch]]:
        """`batches[start:]` prepared, `per_update` at a time (`train.accumulate`; the
        epoch's last group may hold fewer), each group when the loop asks for it: after it
        launched the update before."""
        for first in range(start, len(batches), per_update):
            yield [self.prepare(indices) for indices in batches[first : first + per_update]]
