"""One `seq2seq train` session: set up or resume a run directory, train, score the tests."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from seq2seq.checkpoint import (
    RunDir,
    training_lock,
)
from seq2seq.config import Config, validation_metrics
from seq2seq.data.tokenizer import PAD_ID
from seq2seq.device import (
    check_precision,
    machine,
    machine_label,
    out_of_memory,
    out_of_memory_reported,
    pick_device,
    use_threads,
)
from seq2seq.errors import ResourceError, UserError
from seq2seq.files import atomic_write_text
from seq2seq.models import Seq2Seq, build_model, count_parameters
from seq2seq.models.lora import LORA_BASE, adapt
from seq2seq.train.datasets import Datasets, load_datasets
from seq2seq.train.distillation import check_teacher
from seq2seq.train.distributed import World, lost_peer, start_world, stop_world
from seq2seq.train.init_from import Parent
from seq2seq.train.interrupt import Interrupted, StopSignals
from seq2seq.train.logs import FILE_ONLY, TensorBoardLog, setup_logging
from seq2seq.train.resumption import check_resumable, resume_state
from seq2seq.train.testing import score_test
from seq2seq.train.trainer import Trainer
from seq2seq.version import VERSION

ONEDNN_KERNEL_CACHE = 64


@functools.cache
def _git_revision() -> str | None:
    """The commit checked out when this process first asked, at its first run's start: the
    code it imported, even where a sweep's later runs start after new commits."""
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


def _write_meta(
    run: RunDir, resumed: bool, world: World, device: torch.device, parent: Parent | None
) -> str | None:
    """meta.json: versions, command and start; the machines it trained on, one entry a
    change of machine (kept on resume); a fine-tuning run's parent (kept on resume).
    Returns where a resumed run moved ("on X, trained on Y so far"), else None."""
    before = _read_meta(run)
    machines = [m for m in before.get("machines", []) if isinstance(m, dict)] if resumed else []
    here = machine(device)
    moved_from = machines[-1] if machines and machines[-1] != here else None
    if not machines or moved_from is not None:
        machines.append(here)
    meta = {
        "seq2seq": VERSION,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "git_revision": _git_revision(),
        "command": sys.argv,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "resumed": resumed,
        "processes": world.size,
        "machines": machines,
    }
    init_from = parent.record() if parent is not None else before.get("init_from")
    if init_from is not None:
        meta["init_from"] = init_from
    atomic_write_text(run.meta, json.dumps(meta, indent=2) + "\n")
    if moved_from is None:
        return None
    return f"on {machine_label(here)}, trained on {machine_label(moved_from)} so far"


def _read_meta(run: RunDir) -> dict:
    try:
        meta = json.loads(run.meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: it is rewritten
    return meta if isinstance(meta, dict) else {}


def train(cfg: Config, run_dir: Path) -> dict:
    """Train (or resume) the run in `run_dir`, then score the test sets with `best`.

    Under torchrun every process runs this; rank 0 alone writes the run directory.
    """
    world = start_world(cfg.train.device)
    run = RunDir(Path(run_dir))
    created = _outermost_missing(run.root)
    try:
        with training_lock(run) if world.is_main else contextlib.nullcontext():
            scores = _fit_and_test(_set_up(cfg, run, world, created))
            # The other ranks wait while rank 0 scores the test sets, so that no rank
            # tears down its gloo connections while a peer still holds them (a CI run saw
            # rank 1 abort as rank 0 finished).
            world.barrier()
            return scores
    except RuntimeError as error:
        if not (world.distributed and lost_peer(error)):
            raise
        raise ResourceError(
            f"process {world.rank} of {world.size} lost contact with the others (one stopped "
            "or died: see its message); what it saved is kept: run the same "
            "torchrun command to resume"
        ) from None
    finally:
        stop_world(world)


def prepare(cfg: Config, run_dir: Path) -> Datasets:
    """Make the run's tokenizer and prepare its training corpora, ahead of training (once,
    then train on many processes); what is there and still right is kept."""
    run = RunDir(Path(run_dir))
    created = _outermost_missing(run.root)
    try:
        check_resumable(run, cfg)
        return load_datasets(cfg, run, setup_logging(run.log))
    except (UserError, OSError):
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise


def _set_up(cfg: Config, run: RunDir, world: World, created: Path | None) -> Trainer:
    """The run directory, data, model and trainer, resumed if the run has a checkpoint.

    A problem found here (bad data, an unusable checkpoint, a full disk) removes the
    directories that this start `created` (all of a new `a/b/run`, not only `run`): a
    failed start leaves nothing half-made behind.
    """
    try:
        return build_trainer(cfg, run, world)
    except (UserError, OSError):
        if created is not None and world.is_main:
            shutil.rmtree(created, ignore_errors=True)
        raise


def _outermost_missing(path: Path) -> Path | None:
    """The outermost directory of `path` that does not exist yet (None: it exists)."""
    missing = None
    for directory in [path, *path.parents]:
        if directory.exists():
            break
        missing = directory
    return missing


def build_trainer(cfg: Config, run: RunDir, world: World) -> Trainer:
    """Set up (or resume) the run directory, data, model and trainer; also for benchmarks."""
    resuming = check_resumable(run, cfg)
    parent = None if resuming or cfg.train.init_from is None else Parent.find(cfg.train.init_from)
    if parent is not None:
        parent.check_fits(cfg)
    check_teacher(cfg)  # before the data: a teacher that cannot teach costs no preparation
    device = set_up_process(cfg, world)
    moved = None
    if world.is_main:
        moved = _write_run_files(cfg, run, world, device, resuming, parent)
    log = setup_logging(run.log if world.is_main else None, world.rank)
    data = _load_data_main_first(cfg, run, world, log)
    model = _build_model(cfg, data, device)
    if parent is not None:  # before the trainer: DDP copies rank 0's weights to the others
        parent.load_weights(model, cfg, data.tokenizer)
        log.info("fine-tuning from %s", parent.checkpoint)
    if cfg.train.lora is not None:
        base = run.checkpoint(LORA_BASE) if world.is_main and not resuming else None
        adapt(model, cfg, base, data.tokenizer.fingerprint)
    trainer = Trainer(cfg, run, model, data, device, log, world)
    found = resume_state(run, log) if resuming else None
    if found is not None:
        trainer.restore(*found)
        log.info("resumed %s from step %d", run.root, trainer.progress.step)
    if moved is not None:
        log.warning(
            "resumed %s: it goes on from the same weights, but its sums round differently "
            "here, so not float for float as it would have there",
            moved,
        )
    log.info(
        "model: %s, %d parameters; %s; source/target length ratio %.3f; "
        "device %s, %d CPU threads; %d process(es); precision %s",
        cfg.model.arch,
        count_parameters(model),
        cfg.model.describe_attention(),
        data.length_ratio,
        device,
        torch.get_num_threads(),
        world.size,
        cfg.train.precision,
    )
    return trainer


def _build_model(cfg: Config, data: Datasets, device: torch.device) -> Seq2Seq:
    """The model for the run's vocabularies, on `device`; too large to allocate is a
    one-line error naming the size fields."""
    vocab = (data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size)
    try:
        model = build_model(cfg.model, *vocab, PAD_ID).to(device)
    except (RuntimeError, MemoryError) as error:
        if not out_of_memory(error):
            raise
        m = cfg.model
        sizes = (
            f"model.embed_dim={m.embed_dim}, hidden_dim={m.hidden_dim}, ff_dim={m.ff_dim}, "
            f"encoder_layers={m.encoder_layers}, decoder_layers={m.decoder_layers}"
        )
        raise UserError(
            f"the model does not fit in memory ({sizes}; vocabularies {vocab[0]} and "
            f"{vocab[1]}); lower these sizes"
        ) from None
    model.length_ratio.fill_(data.length_ratio)
    return model


def _write_run_files(
    cfg: Config,
    run: RunDir,
    world: World,
    device: torch.device,
    resuming: bool,
    parent: Parent | None,
) -> str | None:
    """Create the run directory with its config.yaml and meta.json (and a fine-tuning
    run's tokenizer, copied from its parent); where a resumed run moved, as _write_meta says."""
    try:
        run.root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(
            f"cannot create run directory {run.root} ({error.strerror}); pass another --run-dir"
        ) from None
    atomic_write_text(run.config, cfg.to_yaml())
    moved_from = _write_meta(run, resuming, world, device, parent)
    if parent is not None:
        parent.copy_tokenizer(run)
    return moved_from


def set_up_process(cfg: Config, world: World) -> torch.device:
    """This process's threads, kernel cache and random seeds; the device it trains on."""
    on_this_machine = int(os.environ.get("LOCAL_WORLD_SIZE", world.size))  # torchrun's
    use_threads(cfg.train.threads, on_this_machine)
    # oneDNN keeps every bf16 matmul kernel it builds, one per new batch shape, and with
    # the default of 1,024 the resident memory of a bf16 run grows by hundreds of MB over
    # its first few hundred updates. 64 bounds it for ~10% of speed; the variable is read
    # when the first kernel is built, so a user's own setting wins.
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_KERNEL_CACHE))
    random.seed(cfg.seed + world.rank)
    # Rank 0 draws the initial model (DDP copies it to the others); the other ranks draw
    # their own dropout masks.
    torch.manual_seed(cfg.seed + world.rank)
    device = pick_device(cfg.train.device)
    if device.type == "cuda" and world.distributed:
        device = torch.device("cuda", world.local_rank)
    check_precision(cfg.train.precision, device)
    return device


def _load_data_main_first(cfg: Config, run: RunDir, world: World, log: logging.Logger) -> Datasets:
    """The datasets; rank 0 prepares the tokenizer and the ids before the others read them."""
    if not world.is_main:
        world.barrier()
    data = load_datasets(cfg, run, log)
    if world.is_main:
        world.barrier()
    return data


def _fit_and_test(trainer: Trainer) -> dict:
    cfg, run, log, world = trainer.cfg, trainer.run, trainer.log, trainer.world
    board = TensorBoardLog(run.tensorboard if world.is_main else None)
    board.add_config(cfg.to_dict(), [f"valid/{name}" for name in validation_metrics()])

    def exhausted() -> str:
        return (
            f"out of memory at step {trainer.progress.step} with train.batch_tokens="
            f"{cfg.train.batch_tokens}; {run.checkpoint('last')} is kept: free memory and run "
            "the same command to resume, or train a new run with smaller batches"
        )

    try:
        with out_of_memory_reported(exhausted), StopSignals() as signals:
            trainer.fit(board, signals)
    finally:
        board.close()
    if trainer.stopped_by is not None:
        message = (
            f"training stopped by {signal.Signals(trainer.stopped_by).name} at step "
            f"{trainer.progress.step}; saved {run.checkpoint('last')}; resume with the same command"
        )
        log.info(message, extra=FILE_ONLY)  # the command prints it as it ends
        raise Interrupted(trainer.stopped_by, message)
    if not world.is_main:
        return {}
    atomic_write_text(run.summary, json.dumps(trainer.summary(), indent=2) + "\n")
    return score_test(trainer)
