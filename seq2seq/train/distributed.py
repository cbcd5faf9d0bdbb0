"""Data-parallel training on PyTorch's own engine: torchrun starts the processes, DDP
averages the gradients.

`torchrun --nproc_per_node=N -m seq2seq train ...` sets RANK, WORLD_SIZE and LOCAL_RANK
for each process; a plain `seq2seq train` is a world of one, where every collective
below is a no-op, so the trainer has a single code path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from seq2seq.data.epoch_batches import TrainBatches
from seq2seq.errors import UserError

# Rank 0 validates and writes checkpoints while the others wait at the next collective;
# gloo's 30-minute default would kill a long validation or a slow tokenizer training.
COLLECTIVE_TIMEOUT = timedelta(hours=4)


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Only the main process writes files and logs."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def shard(self, indices: list[int]) -> list[int]:
        """This rank's share of a global batch (strided, so shares differ by at most one)."""
        return indices[self.rank :: self.size]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The element-wise sum over ranks (a new tensor)."""
        tensor = tensor.detach().clone()
        if self.distributed:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def max(self, tensor: torch.Tensor) -> torch.Tensor:
        """The element-wise maximum over ranks (a new tensor)."""
        tensor = tensor.detach().clone()
        if self.distributed:
            tensor = tensor.to(self.device)
            dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return tensor.cpu()

    def broadcast(self, value: Any) -> Any:
        """Rank 0's `value` on every rank (any picklable object)."""
        if not self.distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, value: Any) -> list[Any]:
        """Every rank's `value`, in rank order, on every rank."""
        if not self.distributed:
            return [value]
        values: list[Any] = [None] * self.size
        dist.all_gather_object(values, value)
        return values

    @property
    def device(self) -> torch.device:
        """Where collectives run: gloo reduces CPU tensors, nccl CUDA ones."""
        if self.distributed and dist.get_backend() == "nccl":
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")


def unused_parameters(model: nn.Module, batches: TrainBatches) -> list[str]:
    """Parameters that a training forward does not reach (e.g. key projections that
    `location` attention ignores): DDP must be told, or it waits for their gradients."""
    was_training = model.training
    model.eval()  # no dropout, so the probe draws no random numbers
    batch = batches.batch([0]).to(next(model.parameters()).device)
    model(batch.src, batch.src_mask, batch.tgt_in).sum().backward()
    unused = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return unused


def data_parallel(
    model: nn.Module, world: World, device: torch.device, batches: TrainBatches
) -> nn.Module:
    """The model wrapped in DDP, or the model itself in a world of one."""
    if not world.distributed:
        return model
    return DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=bool(unused_parameters(model, batches)),
    )


def start_world(device_name: str) -> World:
    """Join the process group that torchrun describes in the environment, if any."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return World()
    world = World(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", "0")))
    use_cuda = device_name != "cpu" and torch.cuda.is_available()
    if use_cuda:
        if world.local_rank >= torch.cuda.device_count():
            raise UserError(
                f"local rank {world.local_rank} has no GPU ({torch.cuda.device_count()} "
                "visible); lower --nproc_per_node to the number of GPUs"
            )
        torch.cuda.set_device(world.local_rank)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=COLLECTIVE_TIMEOUT)
    return world


def lost_peer(error: BaseException) -> bool:
    """Whether a collective failed because another process of the world went away (killed,
    crashed): gloo reports a reset connection, newer backends a `DistError`."""
    return isinstance(error, dist.DistError) or (
        isinstance(error, RuntimeError) and "gloo/transport" in str(error)
    )


def stop_world(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()
