"""The training loop: updates, validation, checkpoints, early stopping, resumption."""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from seq2seq.attention import padding_mask
from seq2seq.checkpoint import (
    RunDir,
    atomic_write_bytes,
    atomic_write_text,
    save_checkpoint,
    update_best,
)
from seq2seq.config import Config
from seq2seq.data.tokenizer import PAD_ID
from seq2seq.errors import UserError
from seq2seq.models import Seq2Seq
from seq2seq.report.logging import TensorBoardLog, progress_bar
from seq2seq.report.plots import attention_figure, figure_png
from seq2seq.train.datasets import Datasets
from seq2seq.train.interrupt import StopSignals
from seq2seq.train.optim import LearningRate, build_optimizer
from seq2seq.train.validation import HIGHER_IS_BETTER, ValidationResult, Validator


@dataclass
class Progress:
    """Where training stands; plain data, saved in every checkpoint."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # the next batch of `epoch` to train on
    elapsed: float = 0.0  # seconds of training so far, over all sessions
    best: list[tuple[float, int]] = field(default_factory=list)  # (score, step), best first
    bad_validations: int = 0
    last_validation: int = -1
    skipped_updates: int = 0  # updates skipped for a non-finite loss or gradient
    skipped_in_a_row: int = 0


class Trainer:
    def __init__(
        self,
        cfg: Config,
        run: RunDir,
        model: Seq2Seq,
        data: Datasets,
        device: torch.device,
        log: logging.Logger,
    ) -> None:
        self.cfg, self.run, self.model, self.data = cfg, run, model, data
        self.device, self.log = device, log
        self.optimizer = build_optimizer(cfg.train.optimizer, model.parameters())
        self.schedule = LearningRate(cfg.train.schedule, cfg.train.optimizer.lr)
        self.validator = Validator(cfg, data, device)
        self.progress = Progress()
        self.higher_is_better = HIGHER_IS_BETTER[cfg.train.metric]
        self.clock: tuple[float, float] = (time.time(), 0.0)  # (session start, elapsed before it)
        self.signals: StopSignals | None = None

    def elapsed(self) -> float:
        """Seconds of training over all sessions of this run, up to now."""
        started, before = self.clock
        return before + time.time() - started

    # -- checkpoints -------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "progress": asdict(self.progress),
            "rng": rng,
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        progress = dict(state["progress"])
        progress["best"] = [tuple(item) for item in progress["best"]]
        self.progress = Progress(**progress)
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        if "cuda" in state["rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])

    def save_best(self, score: float) -> None:
        """Keep the N best checkpoints by the validation metric; `best` is the top one."""
        step = self.progress.step
        best, dropped = update_best(
            self.progress.best, score, step, self.cfg.train.keep_best, self.higher_is_better
        )
        self.progress.best = best
        if any(s == step for _, s in best):
            path = self.run.checkpoint(f"step-{step}")
            save_checkpoint(path, {"model": self.model.state_dict(), "step": step, "score": score})
            if best[0][1] == step:
                atomic_write_bytes(self.run.checkpoint("best"), path.read_bytes())
        for old in dropped:
            self.run.checkpoint(f"step-{old}").unlink(missing_ok=True)

    # -- the loop ------------------------------------------------------------------------------

    def stop_reason(self) -> str | None:
        """Why training must stop now, or None while budget is left."""
        train, progress = self.cfg.train, self.progress
        if self.signals is not None and self.signals.received:
            return f"stopped by {self.signals.name}"
        if train.patience is not None and progress.bad_validations >= train.patience:
            return f"no improvement of {train.metric} in {train.patience} validations"
        if train.max_steps is not None and progress.step >= train.max_steps:
            return f"train.max_steps={train.max_steps} reached"
        if train.max_time is not None and self.elapsed() >= train.max_time:
            return f"train.max_time={train.max_time:.0f}s used"
        if progress.epoch >= train.max_epochs:
            return f"train.max_epochs={train.max_epochs} done"
        return None

    def loss(self, logits: torch.Tensor, targets: torch.Tensor, n_tokens: int) -> torch.Tensor:
        """Label-smoothed cross-entropy per target token."""
        return (
            F.cross_entropy(
                logits.flatten(0, 1).float(),
                targets.flatten(),
                ignore_index=PAD_ID,
                label_smoothing=self.cfg.train.label_smoothing,
                reduction="sum",
            )
            / n_tokens
        )

    def train_step(self, indices: list[int]) -> tuple[torch.Tensor, int]:
        """One update on a batch -> (loss, target tokens); 0 tokens if it was skipped."""
        batch = self.data.train.batch(indices).to(self.device)
        mask = padding_mask(batch.src_lengths, batch.src.size(1))
        loss = self.loss(
            self.model(batch.src, mask, batch.tgt_in), batch.tgt_out, batch.n_tgt_tokens
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip = self.cfg.train.clip_grad_norm
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip or float("inf"))
        self.schedule.apply(self.optimizer, self.progress.step + 1)
        if not bool(torch.isfinite(loss) & torch.isfinite(norm)):
            self.skip_update(loss.item(), norm.item())
            return loss.new_zeros(()), 0
        self.optimizer.step()
        self.progress.skipped_in_a_row = 0
        return loss.detach(), batch.n_tgt_tokens

    def skip_update(self, loss: float, norm: float) -> None:
        """Drop an update whose loss or gradient is not finite; stop after too many in a row."""
        progress, limit = self.progress, self.cfg.train.max_skipped_updates
        self.optimizer.zero_grad(set_to_none=True)
        progress.skipped_updates += 1
        progress.skipped_in_a_row += 1
        self.log.warning(
            "step %d: loss %s, gradient norm %s: update skipped (%d so far, %d in a row)",
            progress.step + 1, loss, norm, progress.skipped_updates, progress.skipped_in_a_row,
        )  # fmt: skip
        if progress.skipped_in_a_row >= limit:
            raise UserError(
                f"{limit} updates in a row had a non-finite loss or gradient (at step "
                f"{progress.step + 1}); the last good checkpoint is kept in "
                f"{self.run.checkpoints}; lower train.optimizer.lr or check the data"
            )

    def save_last(self) -> None:
        """Save the resume checkpoint, keeping the one before it as `previous`."""
        self.progress.elapsed = self.elapsed()
        last = self.run.checkpoint("last")
        if last.is_file():
            last.replace(self.run.checkpoint("previous"))
        save_checkpoint(last, self.state_dict())

    def fit(self, board: TensorBoardLog, signals: StopSignals | None = None) -> None:
        """Train until a budget runs out, or until a stop signal: then save and return."""
        cfg, progress = self.cfg.train, self.progress
        self.signals = signals
        self.model.train()
        self.clock = (time.time(), progress.elapsed)
        bar = progress_bar(progress.step, cfg.max_steps)
        window_loss, window_tokens, window_steps, window_start = 0.0, 0, 0, time.time()
        while self.stop_reason() is None:
            batches = self.data.train.epoch(progress.epoch)
            while progress.batch_in_epoch < len(batches) and self.stop_reason() is None:
                loss, tokens = self.train_step(batches[progress.batch_in_epoch])
                progress.batch_in_epoch += 1
                progress.step += 1
                window_loss, window_tokens = window_loss + loss, window_tokens + tokens
                window_steps += 1
                bar.update(1)
                if progress.step % cfg.log_every == 0:
                    seconds = time.time() - window_start
                    mean_loss = float(window_loss) / window_steps
                    speed = window_tokens / max(seconds, 1e-9)
                    lr = self.optimizer.param_groups[0]["lr"]
                    bar.set_postfix(loss=f"{mean_loss:.3f}", tok_s=f"{speed:.0f}")
                    self.log.info(
                        "step %d  epoch %d  loss %.4f  lr %.2e  %.0f target tokens/s",
                        progress.step,
                        progress.epoch + 1,
                        mean_loss,
                        lr,
                        speed,
                    )
                    board.add(
                        progress.step,
                        "train",
                        {
                            "loss": mean_loss,
                            "perplexity": math.exp(min(mean_loss, 100.0)),
                            "learning_rate": lr,
                            "tokens_per_s": speed,
                        },
                    )
                    window_loss, window_tokens, window_steps = 0.0, 0, 0
                    window_start = time.time()
                if progress.step % cfg.valid_every == 0:
                    self.validate(board)
            if progress.batch_in_epoch >= len(batches):
                progress.epoch += 1
                progress.batch_in_epoch = 0
        bar.close()
        reason = self.stop_reason()
        if self.signals is not None and self.signals.received:
            self.save_last()  # no validation: a stop signal asks to be quick
        elif progress.last_validation != progress.step:
            self.validate(board)
        self.log.info("training stopped at step %d: %s", progress.step, reason)

    def validate(self, board: TensorBoardLog) -> ValidationResult:
        progress = self.progress
        result = self.validator(self.model)
        score = result.metric(self.cfg.train.metric)
        self.save_best(score)
        is_best = progress.best[0][1] == progress.step
        progress.bad_validations = 0 if is_best else progress.bad_validations + 1
        if self.schedule.observe(score, self.higher_is_better):
            self.log.info(
                "validation plateau: learning rate scaled to %.2e", self.schedule.at(progress.step)
            )
        progress.last_validation = progress.step
        self.save_last()
        atomic_write_text(
            self.run.valid / f"step-{progress.step}.hyp",
            "".join(line + "\n" for line in result.hypotheses),
        )
        self.log.info(
            "validation at step %d: BLEU %.2f  chrF %.2f  loss %.4f  ppl %.2f%s",
            progress.step,
            result.bleu,
            result.chrf,
            result.loss,
            result.perplexity,
            "  (new best)" if is_best else "",
        )
        for i, amap in enumerate(result.attention_maps):
            figure = attention_figure(amap.weights, amap.src_pieces, amap.tgt_pieces)
            board.add_figure(progress.step, f"attention/{i}", figure)
            atomic_write_bytes(
                self.run.attention / f"step-{progress.step}-{i}.png", figure_png(figure)
            )
        board.add(
            progress.step,
            "valid",
            {
                "bleu": result.bleu,
                "chrf": result.chrf,
                "loss": result.loss,
                "perplexity": result.perplexity,
            },
        )
        return result
