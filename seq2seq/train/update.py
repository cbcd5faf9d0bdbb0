"""One training update, and the tally of the updates since the trainer last looked.

An update is forward, loss, backward, clipping, then the optimizer's step unless the loss
or the gradient is not finite (such an update is skipped and counted). The outcome (loss,
tokens, skips) is summed into a `Tally` where the update computes. The trainer reads the
tally back (`settle`) after every update on a CPU, where reading costs nothing. On one
CUDA GPU (`deferred`) nothing is read back until a log line or a validation needs it: the
step is skipped on the device (the fused Adam's `found_inf`), so the host queues update
after update without waiting for the device, and the update can be a CUDA graph.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seq2seq.data.padded_batches import Batch, padding_mask
from seq2seq.train.distillation import Teacher
from seq2seq.train.distributed import World
from seq2seq.train.feed import PreparedBatch
from seq2seq.train.graphs import GraphedUpdates
from seq2seq.train.loss import alignment_cross_entropy, token_cross_entropy


def defers_reading(device: torch.device, world: World, scaler: torch.amp.GradScaler) -> bool:
    """Whether updates leave their outcome on the device until asked: on one CUDA GPU
    without fp16's gradient scaler (whose step reads the device) nor DDP (whose stop
    rule the ranks agree on after every update)."""
    return device.type == "cuda" and not (world.distributed or scaler.is_enabled())


class Tally:
    """Sums over the updates since the last `read`, as tensors on the update's device."""

    def __init__(self, device: torch.device, in_a_row: int) -> None:
        def zero(dtype: torch.dtype = torch.float32) -> Tensor:
            return torch.zeros((), dtype=dtype, device=device)

        self.loss = zero()  # summed loss per target token of the updates applied
        self.alignment = zero()  # their guided alignment term per target token, likewise
        self.updates = zero(torch.int64)
        self.skipped = zero(torch.int64)
        self.skipped_tokens = zero()  # target tokens of the updates not applied
        self.in_a_row = torch.full((), in_a_row, dtype=torch.int64, device=device)
        self.longest_run = zero(torch.int64)  # the most skips in a row seen in the window
        self.last_skip = zero(torch.int64)  # which update of the window was skipped last
        self.last_loss, self.last_norm = zero(), zero()  # that update's loss and norm

    def add(
        self,
        loss: Tensor,
        norm: Tensor,
        ok: Tensor,
        counted: Tensor,
        tokens: Tensor,
        alignment: Tensor | None = None,
    ) -> None:
        """One update: `ok` whether it was applied, `counted` whether it counts as skipped
        (an fp16 overflow is the gradient scaler's to handle, not a skip); `alignment`:
        guided alignment's term, where it has one. In place only: this runs inside CUDA
        graphs."""
        self.updates.add_(1)
        self.loss.add_(torch.where(ok, loss.detach().float(), 0.0))
        if alignment is not None:
            self.alignment.add_(torch.where(ok, alignment.float(), 0.0))
        self.skipped.add_(counted)
        self.skipped_tokens.add_(~ok * tokens)
        self.in_a_row.add_(1).mul_(counted)
        torch.maximum(self.longest_run, self.in_a_row, out=self.longest_run)
        self.last_skip.copy_(torch.where(counted, self.updates, self.last_skip))
        self.last_loss.copy_(torch.where(counted, loss.detach().float(), self.last_loss))
        self.last_norm.copy_(torch.where(counted, norm.detach().float(), self.last_norm))

    def read(self) -> Settled:
        """The window's sums on the host (one wait for the device), and a fresh window."""
        values = torch.stack(
            [
                self.loss.double(),
                self.updates.double(),
                self.skipped.double(),
                self.skipped_tokens.double(),
                self.in_a_row.double(),
                self.longest_run.double(),
                self.last_skip.double(),
                self.last_loss.double(),
                self.last_norm.double(),
                self.alignment.double(),
            ]
        ).tolist()
        for tensor in (self.loss, self.updates, self.skipped, self.skipped_tokens, self.alignment):
            tensor.zero_()
        self.longest_run.copy_(self.in_a_row)
        (
            loss,
            updates,
            skipped,
            skipped_tokens,
            in_a_row,
            longest,
            last,
            last_loss,
            norm,
            aligned,
        ) = values
        return Settled(
            loss,
            int(updates),
            int(skipped),
            int(skipped_tokens),
            int(in_a_row),
            int(longest),
            int(last),
            last_loss,
            norm,
            aligned,
        )


@dataclass
class Settled:
    loss: float
    updates: int
    skipped: int
    skipped_tokens: int
    in_a_row: int  # skips in a row at the window's end
    longest_run: int  # the most skips in a row reached in the window
    last_skip: int  # the window's update (1-based) skipped last
    last_loss: float
    last_norm: float
    alignment: float  # guided alignment's summed term per target token (0 without)

    @staticmethod
    def where(first: int, last: int) -> str:
        """The updates a look at the tally covers (`first` to `last`): one, or a window."""
        return f"at step {last}" if first == last else f"in steps {first}-{last}"

    def skip_warning(self, first: int, skipped_so_far: int) -> str:
        """The log's line on the window's skipped updates, the window starting at `first`."""
        last = first + self.updates - 1
        what = (
            "update"
            if self.skipped == 1
            else f"{self.skipped} updates of steps {first}-{last}, this one the last,"
        )
        return (
            f"step {first + self.last_skip - 1}: loss {self.last_loss}, gradient norm "
            f"{self.last_norm}: {what} skipped ({skipped_so_far} so far, "
            f"{self.longest_run} in a row)"
        )


@dataclass
class UpdateSetup:
    network: nn.Module  # the model, or its DDP wrapper
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    world: World
    device: torch.device
    precision: torch.dtype | None  # the autocast dtype, or None for fp32
    label_smoothing: float
    alignment_weight: float  # guided alignment's lambda, for batches with gold attention
    clip_grad_norm: float  # 0: no clipping (the norm is still measured)
    deferred: bool  # skip on the device; the tally read back only when asked
    graphs: bool  # the gradients stay allocated (CUDA graphs write into them)
    teacher: Teacher | None = None  # word-level distillation's (train.distill)


class Update:
    """The update of a prepared batch; `compute` is what CUDA graphs capture."""

    def __init__(self, setup: UpdateSetup, in_a_row: int) -> None:
        self.setup = setup
        self.tally = Tally(setup.device, in_a_row)
        self.parameters = [p for p in setup.network.parameters() if p.requires_grad]
        # The model itself (DDP's wrapper holds it as `module`), for its auxiliary loss.
        self.model = getattr(setup.network, "module", setup.network)
        self.run: Callable[[Batch, int], Tensor] = self.compute_eagerly
        self.graphs: GraphedUpdates | None = None
        if setup.graphs:
            for p in self.parameters:  # the graphs write every update's gradients here
                p.grad = torch.zeros_like(p)
            self.run = self.graphs = GraphedUpdates(self.compute, self.compute_eagerly)

    def __call__(self, group: list[PreparedBatch]) -> None:
        """One update on `group`: a batch, or `train.accumulate` batches whose gradients are
        summed (their loss normalised by all their target tokens together)."""
        s = self.setup
        tokens = sum(prepared.tokens for prepared in group)
        if s.deferred:
            if len(group) == 1:
                found_inf = self.run(group[0].batch, tokens)
            else:  # accumulating: never a graph
                found_inf = (~self.accumulate(group, tokens)).float()
            s.optimizer.found_inf = found_inf  # the fused step skips on the device
            s.optimizer.step()
            return
        ok = self.accumulate(group, tokens)
        if s.scaler.is_enabled():
            s.scaler.step(s.optimizer)  # no step, and a lower scale, on an overflow
            s.scaler.update()
        elif bool(ok):
            s.optimizer.step()

    def compute_eagerly(self, batch: Batch, tokens: int) -> Tensor:
        count = torch.full((), tokens, dtype=torch.float32, device=self.setup.device)
        ok = self.compute(
            batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, count, 1.0, batch.alignment
        )
        return (~ok).float()

    def compute(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        tgt_out: Tensor,
        tokens: Tensor | int,
        weight: float,
        alignment: Tensor | None = None,
    ) -> Tensor:
        """Forward, loss, backward and clipping, the outcome added to the tally -> whether
        the step may be taken (a bool tensor on the device)."""
        self.zero_gradients()
        loss = self.backward(src, src_lengths, tgt_in, tgt_out, tokens, weight, alignment)
        return self.finish(loss, tokens)

    def accumulate(self, group: list[PreparedBatch], tokens: int) -> Tensor:
        """`compute` over the batches of `group`, their gradients summed before clipping; in
        DDP the ranks exchange them once, after the last batch."""
        s = self.setup
        self.zero_gradients()
        losses = []
        for number, prepared in enumerate(group):
            last, batch = number == len(group) - 1, prepared.batch
            quiet = s.network.no_sync() if s.world.distributed and not last else nullcontext()
            with quiet:
                loss = self.backward(
                    batch.src,
                    batch.src_lengths,
                    batch.tgt_in,
                    batch.tgt_out,
                    tokens,
                    prepared.weight,
                    batch.alignment,
                )
            losses.append(loss.detach())
        return self.finish(losses[0] if len(losses) == 1 else torch.stack(losses).sum(0), tokens)

    def zero_gradients(self) -> None:
        if self.setup.graphs:
            torch._foreach_zero_([p.grad for p in self.parameters])
        else:
            self.setup.optimizer.zero_grad(set_to_none=True)

    def backward(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        tgt_out: Tensor,
        tokens: Tensor | int,
        weight: float,
        alignment: Tensor | None = None,
    ) -> Tensor:
        """Forward and backward of one batch, its gradient added to the parameters' -> its
        loss over `tokens`, the target tokens of the whole update (with guided alignment:
        (loss, guided alignment's term), both over `tokens`).

        Each rank computes its shard's summed loss over the global batch's target tokens,
        so the ranks' losses add up to the loss of the whole batch; DDP averages gradients
        over ranks, hence the backward of `world.size` times the shard loss. With the
        batch's gold `alignment` (guided alignment), its weighted cross-entropy against
        the attention is added to what is differentiated, and returned beside the loss.
        """
        s = self.setup
        mask = padding_mask(src_lengths, src.size(1))
        autocast = torch.autocast(
            s.device.type, s.precision, enabled=s.precision is not None, cache_enabled=not s.graphs
        )  # a graph may not keep autocast's cache of cast weights past its capture
        self.model.keeps_attention = alignment is not None
        with autocast:
            logits = s.network(src, mask, tgt_in)
            taught = None if s.teacher is None else s.teacher.log_probs(src, mask, tgt_in)
        self.model.keeps_attention = False
        loss = token_cross_entropy(logits, tgt_out, s.label_smoothing)
        if taught is not None:
            loss = s.teacher.mixed_loss(loss, logits, taught, tgt_out)  # type: ignore[union-attr]
        # Hard attention's REINFORCE and entropy terms are valued 0, so the tally's loss
        # stays the cross-entropy; their gradient is what counts.
        auxiliary = self.model.auxiliary_loss(logits, tgt_out)
        if auxiliary is not None:
            loss = loss + auxiliary
        loss = loss / tokens * weight
        if alignment is None:
            s.scaler.scale(loss * s.world.size).backward()
            return loss
        attention = self.model.take_kept_attention()
        guided = (
            alignment_cross_entropy(attention, alignment) * s.alignment_weight / tokens * weight
        )
        s.scaler.scale((loss + guided) * s.world.size).backward()
        return torch.stack([loss.float(), guided.detach()])

    def finish(self, loss: Tensor, tokens: Tensor | int) -> Tensor:
        """Clipping, and the update's outcome (`loss` as `backward` returns it) added to
        the tally -> whether the step may be taken."""
        s = self.setup
        s.scaler.unscale_(s.optimizer)  # clip the true gradients
        norm = torch.nn.utils.clip_grad_norm_(
            self.parameters, s.clip_grad_norm or float("inf"), foreach=True
        )
        loss = s.world.sum(loss)
        loss, alignment = (loss, None) if loss.dim() == 0 else (loss[0], loss[1])
        finite_loss = torch.isfinite(loss)
        ok = finite_loss & torch.isfinite(norm)
        counted = ~finite_loss if s.scaler.is_enabled() else ~ok
        tokens = torch.as_tensor(tokens, device=loss.device)
        self.tally.add(loss, norm, ok, counted, tokens, alignment)
        return ok

    def parameters_finite(self) -> bool:
        """Whether every parameter is finite (a norm that overflows counts as not)."""
        norms = torch._foreach_norm([p.detach() for p in self.parameters])
        return bool(torch.stack(norms).isfinite().all())
