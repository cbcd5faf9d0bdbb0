"""Updates replayed as CUDA graphs, one per padded batch shape.

An eager update on a GPU launches about a thousand kernels, each costing the host several
microseconds; a small model's update is over on the device long before the host has
launched it. A CUDA graph records the launches of one update (forward, loss, backward,
clipping, the tally) for a fixed shape and replays them with one call. The batches are
padded to a few shapes (`feed.pad_to_shape`); the first batch of a shape is trained
eagerly on a side stream (the warm-up that capture needs), the second captures the shape's
graph, and from then on the shape replays it. All graphs share one memory pool: they
never run at once, and what an update leaves behind lives outside the pool (parameters,
gradients, optimizer state, the tally).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch
from torch import Tensor

from seq2seq.config import Config
from seq2seq.data.padded_batches import Batch
from seq2seq.models import Seq2Seq
from seq2seq.train.logs import FILE_ONLY, LOGGER_NAME

# compute(src, src_lengths, tgt_in, tgt_out, tokens, weight) -> ok (a bool tensor)
Compute = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, float], Tensor]
# eager(batch, tokens) -> found_inf: the same update, launched op by op
Eager = Callable[[Batch, int], Tensor]


def captures_graphs(cfg: Config, model: Seq2Seq) -> bool:
    """Whether updates may be CUDA graphs, where the device and precision allow them. A graph
    replays one batch's update; accumulating updates run op by op, and so do recomputed
    layers (their replay of the random generators not tried under capture) and guided
    alignment (its gold attention is not among a graph's inputs), and so does distillation
    (its teacher's time is measured)."""
    train = cfg.train
    return (
        train.cuda_graphs
        and model.graph_capturable
        and train.accumulate == 1
        and not train.checkpoint_activations
        and not any(cfg.data.aligned)
        and train.distill is None
    )


class ShapeGraph:
    """A captured update of one batch shape, with the input buffers it reads."""

    def __init__(self, batch: Batch, compute: Compute, pool: tuple[int, int]) -> None:
        fields = (batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out)
        self.inputs = [t.clone() for t in fields]
        self.tokens = torch.zeros((), device=batch.src.device)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: only this thread is held to what capture allows; another thread of
        # the process may use CUDA meanwhile
        with torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local"):
            self.found_inf = (~compute(*self.inputs, self.tokens, 1.0)).float()

    def replay(self, batch: Batch, tokens: int) -> Tensor:
        for buffer, value in zip(
            self.inputs, (batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out), strict=True
        ):
            buffer.copy_(value, non_blocking=True)
        self.tokens.fill_(tokens)
        self.graph.replay()
        return self.found_inf


class GraphedUpdates:
    """`compute` of a batch: eagerly the first time its shape is seen, then as a graph."""

    def __init__(self, compute: Compute, eager: Eager) -> None:
        self.compute, self.eager = compute, eager
        self.graphs: dict[tuple[int, ...], ShapeGraph] = {}
        self.seen: set[tuple[int, ...]] = set()
        self.pool = torch.cuda.graph_pool_handle()
        self.side = torch.cuda.Stream()
        self.capture_seconds = 0.0  # spent capturing, over this session
        self.failure: str | None = None  # why capturing failed, after which all is eager

    def __call__(self, batch: Batch, tokens: int) -> Tensor:
        shape = (*batch.src.shape, batch.tgt_in.size(1))
        graph = self.graphs.get(shape)
        if self.failure is not None or (graph is None and shape not in self.seen):
            self.seen.add(shape)
            return self.warm_up(batch, tokens)
        if graph is None:
            started = time.perf_counter()
            try:
                graph = self.graphs[shape] = ShapeGraph(batch, self.compute, self.pool)
            except RuntimeError as error:  # an operation CUDA cannot capture: train eagerly
                self.give_up(error)
                return self.warm_up(batch, tokens)
            self.capture_seconds += time.perf_counter() - started
        return graph.replay(batch, tokens)

    def report(self, log: logging.Logger) -> None:
        """In the log file: what capturing the updates cost this session."""
        if self.graphs:
            log.info(
                "CUDA graphs: %d batch shapes captured in %.1f s this session",
                *(len(self.graphs), self.capture_seconds),
                extra=FILE_ONLY,
            )

    def give_up(self, error: RuntimeError) -> None:
        self.failure = str(error).splitlines()[0] if str(error) else type(error).__name__
        logging.getLogger(LOGGER_NAME).warning(
            "CUDA graphs off: capturing an update failed (%s); training goes on op by op "
            "(set train.cuda_graphs: false to say so up front)",
            self.failure,
        )

    def warm_up(self, batch: Batch, tokens: int) -> Tensor:
        """An eager update on a side stream, as capture requires before it."""
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            found_inf = self.eager(batch, tokens)
        main.wait_stream(self.side)
        return found_inf
