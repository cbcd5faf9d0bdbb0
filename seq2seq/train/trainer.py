"""The training loop: updates, validation, checkpoints, early stopping, resumption."""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from seq2seq import __version__
from seq2seq.attention import padding_mask
from seq2seq.checkpoint import (
    RunDir,
    atomic_write_bytes,
    atomic_write_text,
    load_checkpoint,
    save_checkpoint,
    update_best,
)
from seq2seq.config import Config, config_differences
from seq2seq.data.corpus import read_parallel
from seq2seq.data.tokenizer import PAD_ID
from seq2seq.decode.translate import Translator, load_run_config, pick_device
from seq2seq.errors import UserError
from seq2seq.evaluate import Scores, score_corpus
from seq2seq.models import Seq2Seq, build_model, count_parameters
from seq2seq.report.logging import TensorBoardLog, progress_bar, setup_logging
from seq2seq.report.plots import attention_figure, figure_png
from seq2seq.train.datasets import Datasets, load_datasets
from seq2seq.train.optim import LearningRate, build_optimizer
from seq2seq.train.validation import HIGHER_IS_BETTER, ValidationResult, Validator

# Fields that may change when a run is resumed: budgets, not the model or the data.
RESUMABLE_CHANGES = {"train.max_time", "train.max_steps", "train.max_epochs", "train.patience"}


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
        if train.patience is not None and progress.bad_validations >= train.patience:
            return f"no improvement of {train.metric} in {train.patience} validations"
        if train.max_steps is not None and progress.step >= train.max_steps:
            return f"train.max_steps={train.max_steps} reached"
        if train.max_time is not None and self.elapsed() >= train.max_time:
            return f"train.max_time={train.max_time:.0f}s used"
        if progress.epoch >= train.max_epochs:
            return f"train.max_epochs={train.max_epochs} done"
        return None

    def train_step(self, indices: list[int]) -> tuple[torch.Tensor, int]:
        batch = self.data.train.batch(indices).to(self.device)
        mask = padding_mask(batch.src_lengths, batch.src.size(1))
        logits = self.model(batch.src, mask, batch.tgt_in)
        loss = (
            F.cross_entropy(
                logits.flatten(0, 1).float(),
                batch.tgt_out.flatten(),
                ignore_index=PAD_ID,
                label_smoothing=self.cfg.train.label_smoothing,
                reduction="sum",
            )
            / batch.n_tgt_tokens
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.train.clip_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.clip_grad_norm)
        self.schedule.apply(self.optimizer, self.progress.step + 1)
        self.optimizer.step()
        return loss.detach(), batch.n_tgt_tokens

    def fit(self, board: TensorBoardLog) -> None:
        cfg, progress = self.cfg.train, self.progress
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
        if progress.last_validation != progress.step:
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
        progress.elapsed = self.elapsed()
        save_checkpoint(self.run.checkpoint("last"), self.state_dict())
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


def _git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _write_meta(run: RunDir, resumed: bool) -> None:
    meta = {
        "seq2seq": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "git_revision": _git_revision(),
        "command": sys.argv,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "resumed": resumed,
    }
    atomic_write_text(run.meta, json.dumps(meta, indent=2) + "\n")


def _check_same_run(run: RunDir, cfg: Config) -> None:
    differences = [
        d for d in config_differences(load_run_config(run), cfg) if d[0] not in RESUMABLE_CHANGES
    ]
    if differences:
        shown = "; ".join(f"{k}: {old!r} -> {new!r}" for k, old, new in differences[:3])
        raise UserError(
            f"{run.root} holds a run with another config ({shown}); "
            "resume it with its own config or pass a new --run-dir"
        )


def test_scores(cfg: Config, run: RunDir, translator: Translator, log: logging.Logger) -> dict:
    """Translate and score every `data.test` set into `test/` and `test/scores.json`."""
    scores: dict[str, dict] = {}
    for prefix in cfg.data.test:
        corpus = read_parallel(prefix, cfg.data.src, cfg.data.tgt)
        name = Path(prefix).name
        hypotheses = translator.translate(corpus.src)
        result: Scores = score_corpus(hypotheses, corpus.tgt)
        atomic_write_text(
            run.test / f"{name}.{cfg.data.tgt}", "".join(h + "\n" for h in hypotheses)
        )
        scores[name] = result.to_dict()
        log.info("test %s: %s", name, result)
    if scores:
        atomic_write_text(run.test / "scores.json", json.dumps(scores, indent=2) + "\n")
    return scores


def train(cfg: Config, run_dir: Path) -> dict:
    """Train (or resume) the run in `run_dir`, then score the test sets with `best`."""
    run = RunDir(Path(run_dir))
    resuming = run.checkpoint("last").is_file()
    if resuming:
        _check_same_run(run, cfg)
    run.root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run.config, cfg.to_yaml())
    _write_meta(run, resuming)
    log = setup_logging(run.log)
    torch.set_num_threads(cfg.train.threads or os.cpu_count() or 1)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    device = pick_device(cfg.train.device)

    data = load_datasets(cfg, run, log)
    model = build_model(
        cfg.model, data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size, PAD_ID
    ).to(device)
    model.length_ratio.fill_(data.length_ratio)
    trainer = Trainer(cfg, run, model, data, device, log)
    if resuming:
        trainer.restore(load_checkpoint(run.checkpoint("last")))
        log.info("resumed %s from step %d", run.root, trainer.progress.step)
    log.info(
        "model: %s with %s attention, %d parameters; source/target length ratio %.3f; device %s",
        cfg.model.arch,
        cfg.model.attention.type,
        count_parameters(model),
        data.length_ratio,
        device,
    )
    board = TensorBoardLog(run.tensorboard)
    try:
        trainer.fit(board)
    finally:
        board.close()

    model.load_state_dict(load_checkpoint(run.resolve_checkpoint("best"))["model"])
    return test_scores(cfg, run, Translator(model, data.tokenizer, cfg.decode, device), log)
