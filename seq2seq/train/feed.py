"""The batches of an epoch, made ready ahead of the updates that train on them.

A batch is built on the CPU (this rank's shard, padded), then copied to the device. On a
GPU a background thread builds the next batches into pinned memory while the device
trains, and the copies are queued without waiting, so the host never stalls the device
for its data. With `shapes` every batch is padded further, to a few fixed shapes (rows and
lengths rounded up), so that each shape's update can be captured once as a CUDA graph.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from seq2seq.data.batching import Batch, TrainBatches
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.train.distributed import World

# Padded shapes under CUDA graphs: lengths to multiples of 8 and rows to multiples of 16
# give the Multi30k recipe 29 shapes over 3 epochs for 27% more padded tokens.
LENGTH_MULTIPLE = 8
ROW_MULTIPLE = 16
BATCHES_AHEAD = 4


@dataclass
class PreparedBatch:
    indices: list[int]  # the global batch, in corpus positions
    tokens: int  # its target tokens (+ EOS): the loss normaliser of every rank
    weight: float  # 1.0; 0.0 on a rank the batch has no sentence for (it joins with one)
    batch: Batch  # this rank's shard, padded; on the device once fed


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
        self,
        data: TrainBatches,
        world: World,
        device: torch.device,
        shapes: bool,
        ahead: bool | None = None,
    ) -> None:
        self.data, self.world, self.device, self.shapes = data, world, device, shapes
        # A thread builds batches ahead where a device computes meanwhile (not the CPU).
        self.ahead = device.type == "cuda" if ahead is None else ahead
        self.pin = device.type == "cuda"

    def prepare(self, indices: list[int]) -> PreparedBatch:
        """The batch on the CPU (pinned for a GPU), not yet copied."""
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
        return PreparedBatch(indices, self.data.target_tokens(indices), weight, batch)

    @contextmanager
    def stream(self, batches: list[list[int]], start: int) -> Iterator[Iterator[PreparedBatch]]:
        """`batches[start:]`, prepared and on the device, one at a time; on a GPU built
        BATCHES_AHEAD ahead by a thread that stops when the stream is left."""
        todo = batches[start:]
        if not self.ahead:
            yield (self.on_device(self.prepare(b)) for b in todo)
            return
        ready: queue.Queue = queue.Queue(maxsize=BATCHES_AHEAD)
        stop = threading.Event()

        def offer(item: PreparedBatch | BaseException) -> bool:
            """Queue `item` unless the consumer left meanwhile; whether it was queued."""
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def build() -> None:
            try:
                for indices in todo:
                    if not offer(self.prepare(indices)):
                        return
            except BaseException as error:  # handed to the consumer, raised there
                offer(error)

        worker = threading.Thread(target=build, name="batch-feed", daemon=True)
        worker.start()
        try:
            yield (self.on_device(self.take(ready)) for _ in todo)
        finally:
            stop.set()
            worker.join()

    @staticmethod
    def take(ready: queue.Queue) -> PreparedBatch:
        item = ready.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def on_device(self, prepared: PreparedBatch) -> PreparedBatch:
        return replace(prepared, batch=prepared.batch.to(self.device))
