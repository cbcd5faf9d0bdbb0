"""The training loop: updates, validation, checkpoints, early stopping, resumption."""

from __future__ import annotations

import logging
import random
import signal
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from seq2seq.checkpoint import RunDir, load_model_weights, save_checkpoint, update_best
from seq2seq.config import Config
from seq2seq.errors import UserError
from seq2seq.files import atomic_write_bytes
from seq2seq.models import Seq2Seq
from seq2seq.models.lora import weights_state
from seq2seq.train.datasets import Datasets
from seq2seq.train.distillation import load_teacher
from seq2seq.train.distributed import World, data_parallel
from seq2seq.train.ema import WeightAverage
from seq2seq.train.feed import BatchFeed, PreparedBatch
from seq2seq.train.graphs import captures_graphs
from seq2seq.train.interrupt import StopSignals
from seq2seq.train.logs import FILE_ONLY, TensorBoardLog, progress_bar
from seq2seq.train.loss import perplexity
from seq2seq.train.optim import LearningRate, build_optimizer
from seq2seq.train.progress import Progress, TrainWindow, budget_spent, expected_last_step
from seq2seq.train.resumption import warn_of_changed_inputs
from seq2seq.train.update import Settled, Update, UpdateSetup, defers_reading
from seq2seq.train.validation import Validator, higher_is_better, report_validation


class Trainer:
    def __init__(
        self,
        cfg: Config,
        run: RunDir,
        model: Seq2Seq,
        data: Datasets,
        device: torch.device,
        log: logging.Logger,
        world: World | None = None,
    ) -> None:
        self.cfg, self.run, self.model, self.data = cfg, run, model, data
        self.device, self.log = device, log
        self.world = world or World()
        # Training goes through the DDP wrapper (a no-op in a world of one); validation,
        # checkpoints and decoding use the plain model.
        self.network = data_parallel(model, self.world, device, data.train)
        self.precision = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.train.precision)
        # fp16 (CUDA): the loss is scaled up so that small gradients do not vanish in fp16;
        # a step whose scaled gradients overflow is skipped and the scale lowered.
        self.scaler = torch.amp.GradScaler(device.type, enabled=cfg.train.precision == "fp16")
        # On one GPU the host never waits for the device within an update (update.py).
        deferred = defers_reading(device, self.world, self.scaler)
        graphs = deferred and device.type == "cuda" and captures_graphs(cfg, model)
        model.checkpoint_activations = cfg.train.checkpoint_activations
        trained = [p for p in model.parameters() if p.requires_grad]  # train.lora: adapters
        self.optimizer = build_optimizer(cfg.train.optimizer, trained, fused=deferred)
        self.teacher = load_teacher(cfg, data.tokenizer, device)  # None: no train.distill
        self.update = Update(self._update_setup(deferred, graphs), in_a_row=0)
        decay = cfg.train.ema_decay
        self.average = None if decay is None else WeightAverage(model, decay)
        # What validation scores and checkpoints keep for translation: the average, if any.
        self.kept_model = model if self.average is None else self.average.averaged
        self.unsettled_tokens = 0  # target tokens of the updates since the last settle
        self.feed = BatchFeed(data.train, self.world, device, shapes=graphs)
        self.schedule = LearningRate(
            cfg.train.schedule, cfg.train.optimizer.lr, cfg.train.max_steps
        )
        self.validator = Validator(cfg, data, device)
        self.progress = Progress()
        self.higher_is_better = higher_is_better(cfg.train.metric)
        self.clock: tuple[float, float] = (time.time(), 0.0)  # (session start, elapsed before it)
        self.last_is_loadable = True  # whether `last.pt` may become `previous.pt`
        self.signals: StopSignals | None = None
        self.stopped_by: int | None = None  # the signal that stopped training, on every rank

    def _update_setup(self, deferred: bool, graphs: bool) -> UpdateSetup:
        """What every update does its work with (update.py)."""
        train = self.cfg.train
        return UpdateSetup(
            self.network,
            self.optimizer,
            self.scaler,
            self.world,
            self.device,
            self.precision,
            train.label_smoothing,
            train.alignment_weight,
            train.clip_grad_norm,
            deferred,
            graphs,
            self.teacher,
        )

    def elapsed(self) -> float:
        """Seconds of training over all sessions of this run, up to now."""
        started, before = self.clock
        return before + time.time() - started

    # -- checkpoints -------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs; `rng` holds every rank's generators, in rank order."""
        rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return {
            **weights_state(self.kept_model, self.cfg.train.lora),
            **({} if self.average is None else {"training_model": self.model.state_dict()}),
            "model_config": self.model_config(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": asdict(self.progress),
            "rng": self.world.gather(rng),
            "tokenizer": self.data.tokenizer.fingerprint,
            **self.inputs(),
        }

    def summary(self) -> dict[str, Any]:
        """What a finished run reports (DIR/summary.json): for tables across runs."""
        progress, (score, step) = self.progress, self.progress.best[0]
        attention = dict(progress.attention)
        return {
            "steps": progress.step,
            "best_step": step,
            f"best_{self.cfg.train.metric}": score,
            "train_seconds": round(progress.elapsed, 1),
            # Over the whole wall clock of training, validation included.
            "target_tokens_per_s": round(progress.target_tokens / max(progress.elapsed, 1e-9), 1),
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "trained_parameters": sum(p.numel() for p in self.update.parameters),
            "skipped_updates": progress.skipped_updates,
            "validations": [
                record
                | ({"attention": attention[record["step"]]} if record["step"] in attention else {})
                for record in progress.validations
            ],
        }

    def model_config(self) -> dict[str, Any]:
        """The model section, so that a checkpoint that does not fit says which field differs."""
        return self.cfg.model.model_dump(mode="json")

    def restore(self, state: dict[str, Any], path: Path) -> None:
        """Continue from a resume checkpoint read from `path` (`last.pt`, or `previous.pt`
        when `last.pt` was unreadable: it is then overwritten, never kept as `previous`)."""
        if self.average is not None:  # "model" holds the average, "training_model" the weights
            load_model_weights(self.average.averaged, state, self.cfg.model, path)
            state = {**state, "model": state.get("training_model", state["model"])}
        adapted = self.cfg.train.lora is not None  # the adapters load beside their base
        load_model_weights(self.model, state, self.cfg.model, path, merged=not adapted)
        self.last_is_loadable = path == self.run.checkpoint("last")
        warn_of_changed_inputs(state, self.inputs(), self.log)
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        if state.get("scaler"):  # fp16 only; checkpoints of older runs have none
            self.scaler.load_state_dict(state["scaler"])
        self.progress = Progress.from_state(state["progress"])
        self.update.tally.in_a_row.fill_(self.progress.skipped_in_a_row)
        ranks = state["rng"]
        if isinstance(ranks, dict):  # written before checkpoints held one entry per rank
            ranks = [ranks]
        if len(ranks) != self.world.size:
            self.log.warning(
                "resuming %d processes from a checkpoint of %d: the data order is kept, "
                "the random numbers (dropout) are not those of an uninterrupted run",
                self.world.size,
                len(ranks),
            )
        rng = ranks[self.world.rank % len(ranks)]
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])

    def inputs(self) -> dict[str, Any]:
        """What the run learns from, by checkpoint key, which a resume checks."""
        teacher = {} if self.teacher is None else {"teacher": self.teacher.identity}
        return {"corpus": self.data.corpus_key, **teacher}

    def save_best(self, score: float) -> None:
        """Keep the N best checkpoints by the validation metric; `best` is the top one."""
        step = self.progress.step
        best, dropped = update_best(
            self.progress.best, score, step, self.cfg.train.keep_best, self.higher_is_better
        )
        self.progress.best = best
        if not self.world.is_main:
            return
        if any(s == step for _, s in best):
            path = self.run.checkpoint(f"step-{step}")
            state = {
                **weights_state(self.kept_model, self.cfg.train.lora),
                "model_config": self.model_config(),
                "tokenizer": self.data.tokenizer.fingerprint,
            }
            save_checkpoint(path, {**state, "step": step, "score": score})
            if best[0][1] == step:
                atomic_write_bytes(self.run.checkpoint("best"), path.read_bytes())
        for old in dropped:
            self.run.checkpoint(f"step-{old}").unlink(missing_ok=True)

    # -- the loop ------------------------------------------------------------------------------

    def stop_reason(self) -> str | None:
        """Why training must stop now, or None while budget is left; every rank agrees."""
        reason = budget_spent(self.cfg.train, self.progress, self.elapsed())
        received = self.signals.received if self.signals is not None else None
        stop, number = self.world.max(torch.tensor([reason is not None, received or 0])).tolist()
        if number:
            self.stopped_by = number
            return f"stopped by {signal.Signals(number).name}"
        if stop:
            return reason or "another process used up its budget"
        return None

    def expected_last_step(self, batches: int, first_step: int) -> int:
        """For the progress bar: when the first budget will end this run, at this
        session's speed so far, for epochs of `batches` batches."""
        seconds = time.time() - self.clock[0]
        done = self.progress.step - first_step
        rate = done / seconds if done and seconds > 0 else None
        updates = -(-batches // self.cfg.train.accumulate)
        return expected_last_step(self.cfg.train, self.progress, self.elapsed(), updates, rate)

    def train_step(self, group: list[PreparedBatch]) -> None:
        """One update on prepared global batches (`train.accumulate` of them, or fewer at
        an epoch's end); its outcome waits in the tally."""
        self.schedule.apply(self.optimizer, self.progress.step + 1)
        self.update(group)
        if self.average is not None:
            self.average.update(self.progress.step + 1)
        self.unsettled_tokens += sum(prepared.tokens for prepared in group)

    def train_batches(self, batches: list[list[int]]) -> Settled:
        """Updates on these global batches, outside the loop's budgets and logs (for
        benchmarks) -> their tally."""
        for group in self.feed.updates(batches, 0, self.cfg.train.accumulate):
            self.train_step(group)
            self.progress.step += 1
        return self.settle(TrainWindow())

    def settle(self, window: TrainWindow) -> Settled:
        """Read the tally of the updates since the last call into the progress and the log
        window; warn of skipped updates, and stop if too many came in a row or the model
        is no longer finite."""
        progress, settled = self.progress, self.update.tally.read()
        tokens = self.unsettled_tokens - round(settled.skipped_tokens)
        self.unsettled_tokens = 0
        window.add(settled.loss, tokens, settled.updates, settled.alignment)
        progress.target_tokens += tokens
        progress.skipped_updates += settled.skipped
        progress.skipped_in_a_row = settled.in_a_row
        first = progress.step - settled.updates + 1
        where = settled.where(first, progress.step)
        if settled.skipped:
            self.log.warning(settled.skip_warning(first, progress.skipped_updates))
        limit = self.cfg.train.max_skipped_updates
        if settled.longest_run >= limit:
            raise UserError(
                f"{limit} updates in a row had a non-finite loss or gradient ({where}); "
                f"{self.kept()}; lower train.optimizer.lr or check the data"
            )
        if settled.updates and not self.update.parameters_finite():
            raise UserError(
                f"the update {where} made the model's parameters non-finite; {self.kept()}; "
                "lower train.optimizer.lr"
            )
        return settled

    def kept(self) -> str:
        """What a run that stops on an error leaves to resume from."""
        last = self.run.checkpoint("last")
        if last.is_file():
            return f"the last good checkpoint is kept in {last}"
        return "no checkpoint was written yet (none before the first validation)"

    def save_last(self) -> None:
        """Save the resume checkpoint, keeping the one before it as `previous`.

        Every rank calls it (the state gathers their generators); rank 0 writes.
        """
        self.progress.elapsed = self.elapsed()
        state = self.state_dict()
        if not self.world.is_main:
            return
        last = self.run.checkpoint("last")
        # A complete checkpoint exists at every instant: the old `last` becomes `previous`
        # before the new one is written, unless it is the unreadable one resuming skipped.
        if last.is_file() and self.last_is_loadable:
            last.replace(self.run.checkpoint("previous"))
        save_checkpoint(last, state)
        self.last_is_loadable = True

    def fit(self, board: TensorBoardLog, signals: StopSignals | None = None) -> None:
        """Train until a budget runs out, or until a stop signal: then save and return."""
        cfg, progress = self.cfg.train, self.progress
        self.signals = signals
        self.model.train()
        self.clock = (time.time(), progress.elapsed)
        bar = progress_bar(progress.step, cfg.max_steps, enabled=self.world.is_main)
        first_step, window = progress.step, TrainWindow()
        reason = self.stop_reason()
        while reason is None:
            batches = self.data.train.epoch(progress.epoch)
            bar.total = self.expected_last_step(len(batches), first_step)
            for group in self.feed.updates(batches, progress.batch_in_epoch, cfg.accumulate):
                self.train_step(group)
                progress.batch_in_epoch += len(group)
                progress.step += 1
                bar.update(1)
                # The first update too: a new run says at once that it trains, and how fast.
                log = progress.step % cfg.log_every == 0 or progress.step == first_step + 1
                validate = progress.step % cfg.valid_every == 0
                if log or validate or not self.update.setup.deferred:
                    self.settle(window)
                if log:
                    self.log_train(window, board)
                    bar.total = self.expected_last_step(len(batches), first_step)
                    bar.set_postfix(loss=f"{window.mean_loss:.3f}", tok_s=f"{window.speed:.0f}")
                    window = TrainWindow()
                if validate:
                    began = time.time()
                    self.validate(board)
                    window.start += time.time() - began  # its speed is of training alone
                reason = self.stop_reason()
                if reason is not None:
                    break
            if progress.batch_in_epoch >= len(batches):
                progress.epoch += 1
                progress.batch_in_epoch = 0
                reason = self.stop_reason()
        self.settle(window)
        bar.close()
        if self.stopped_by is not None:
            self.save_last()  # no validation: a stop signal asks to be quick
        elif progress.last_validation != progress.step:
            self.validate(board)
        # A stop on a signal: the command's last line says it, with what was saved.
        quiet = FILE_ONLY if self.stopped_by is not None else None
        self.log.info("training stopped at step %d: %s", progress.step, reason, extra=quiet)
        if self.update.graphs is not None:
            self.update.graphs.report(self.log)

    def log_train(self, window: TrainWindow, board: TensorBoardLog) -> None:
        lr = self.schedule.at(self.progress.step)
        guided = any(self.cfg.data.aligned)
        aligned = f"  alignment {window.mean_alignment:.4f}" if guided else ""
        self.log.info(
            "step %d  epoch %d  loss %.4f%s  lr %.2e  %.0f target tokens/s%s",
            self.progress.step,
            self.progress.epoch + 1,
            window.mean_loss,
            aligned,
            lr,
            window.speed,
            "" if self.teacher is None else self.teacher.share(window.start),
        )
        values = {
            "loss": window.mean_loss,
            "perplexity": perplexity(window.mean_loss),
            "learning_rate": lr,
            "tokens_per_s": window.speed,
        }
        if guided:
            values["alignment_loss"] = window.mean_alignment
        board.add(self.progress.step, "train", values)

    def validate(self, board: TensorBoardLog) -> None:
        """Validate on rank 0; every rank then updates the same best-N, patience and schedule."""
        progress = self.progress
        result = self.validator(self.kept_model) if self.world.is_main else None
        score = self.world.broadcast(
            None if result is None else result.metric(self.cfg.train.metric)
        )
        self.save_best(score)
        is_best = progress.best[0][1] == progress.step
        progress.bad_validations = 0 if is_best else progress.bad_validations + 1
        if self.schedule.observe(score, self.higher_is_better):
            self.log.info(
                "validation plateau: learning rate scaled to %.2e", self.schedule.at(progress.step)
            )
        progress.last_validation = progress.step
        if result is not None:
            progress.validations.append(result.record(progress.step))
            if result.attention:
                progress.attention.append((progress.step, result.attention))
        self.save_last()
        if result is not None:
            report_validation(
                result, self.progress.step, is_best, self.run, self.data, board, self.log
            )
