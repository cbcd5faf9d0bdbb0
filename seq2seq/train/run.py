"""One `seq2seq train` session: set up or resume a run directory, train, score the tests."""

from __future__ import annotations

import json
import logging
import os
import platform
import random
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from seq2seq import __version__
from seq2seq.checkpoint import RunDir, atomic_write_text, load_checkpoint
from seq2seq.config import Config, config_differences
from seq2seq.data.corpus import read_parallel
from seq2seq.data.tokenizer import PAD_ID
from seq2seq.decode.translate import Translator, load_run_config, pick_device
from seq2seq.errors import UserError
from seq2seq.evaluate import Scores, score_corpus
from seq2seq.models import build_model, count_parameters
from seq2seq.report.logging import TensorBoardLog, setup_logging
from seq2seq.train.datasets import load_datasets
from seq2seq.train.interrupt import Interrupted, StopSignals
from seq2seq.train.trainer import Trainer

# Fields that may change when a run is resumed: budgets, not the model or the data.
RESUMABLE_CHANGES = {"train.max_time", "train.max_steps", "train.max_epochs", "train.patience"}


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


def resume_state(run: RunDir, log: logging.Logger) -> dict | None:
    """The newest loadable resume checkpoint (`last`, else `previous`), or None for a new run.

    A corrupt or truncated one is reported and skipped, never silently.
    """
    problems = []
    for name in ("last", "previous"):
        path = run.checkpoint(name)
        if not path.is_file():
            continue
        try:
            state = load_checkpoint(path)
        except UserError as error:
            log.warning("%s; falling back to the checkpoint before it", error)
            problems.append(str(error))
            continue
        if problems:
            log.warning("resuming from %s (step %d)", path, state["progress"]["step"])
        return state
    if problems:
        raise UserError(
            f"no loadable checkpoint to resume {run.root} from: {'; '.join(problems)}; "
            "train into a new --run-dir"
        )
    return None


def train(cfg: Config, run_dir: Path) -> dict:
    """Train (or resume) the run in `run_dir`, then score the test sets with `best`."""
    run = RunDir(Path(run_dir))
    resuming = run.checkpoint("last").is_file() or run.checkpoint("previous").is_file()
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
    state = resume_state(run, log) if resuming else None
    if state is not None:
        trainer.restore(state)
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
        with StopSignals() as signals:
            trainer.fit(board, signals)
    finally:
        board.close()
    if signals.received:
        message = (
            f"training stopped by {signals.name} at step {trainer.progress.step}; "
            f"saved {run.checkpoint('last')}; resume with the same command"
        )
        log.info(message)
        raise Interrupted(signals.received, message)

    model.load_state_dict(load_checkpoint(run.resolve_checkpoint("best"))["model"])
    return test_scores(cfg, run, Translator(model, data.tokenizer, cfg.decode, device), log)
