"""What a resumed run must keep, and where it resumes from: the config fields that may
change between sessions of a run (and so between a finished sweep and its continuation),
the tokenizer its checkpoints read, and the newest checkpoint that loads."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from seq2seq.checkpoint import RunDir, load_checkpoint
from seq2seq.config import Config, config_differences
from seq2seq.data.tokenizer import SETTINGS, trained_settings
from seq2seq.errors import UserError

# Fields that may change when a run is resumed: budgets, and what does not change the
# parameters trained (its name, logging, the validation's alignment scores, checkpoints
# kept, the guard on skipped updates, the sections only the test decode reads, the CPU
# threads, which change speed and at most the float rounding of sums, and recomputed
# activations, which are the same); never the model, the training data or the arithmetic.
RESUMABLE_CHANGES = {
    "name",
    "train.max_time",
    "train.max_steps",
    "train.max_epochs",
    "train.patience",
    "train.log_every",
    "train.keep_best",
    "train.max_skipped_updates",
    "train.test_checkpoint",
    "train.threads",
    "train.checkpoint_activations",
    "train.heatmaps",
    "data.valid_alignments",
}
RESUMABLE_SECTIONS = ("decode.",)


def refused_on_resume(old: Config, new: Config) -> list[tuple[str, Any, Any]]:
    """(field, old value, new value) for each difference that resuming a run trained with
    `old` under `new` refuses: any but RESUMABLE_CHANGES and RESUMABLE_SECTIONS."""
    return [
        d
        for d in config_differences(old, new)
        if not (d[0] in RESUMABLE_CHANGES or d[0].startswith(RESUMABLE_SECTIONS))
    ]


def check_resumable(run: RunDir, cfg: Config) -> bool:
    """Whether `run` resumes (it has a resume checkpoint); one line where `cfg` may not
    train it: another config than its own, or another tokenizer than its checkpoints'."""
    resuming = run.checkpoint("last").is_file() or run.checkpoint("previous").is_file()
    if resuming:
        _check_same_run(run, cfg)
    if run.has_checkpoints():
        _check_tokenizer_kept(run, cfg)
    return resuming


def _check_same_run(run: RunDir, cfg: Config) -> None:
    differences = refused_on_resume(run.load_config(), cfg)
    if differences:
        shown = "; ".join(f"{k}: {old!r} -> {new!r}" for k, old, new in differences[:3])
        raise UserError(
            f"{run.root} holds a run with another config ({shown}); "
            "resume it with its own config or pass a new --run-dir"
        )


def _check_tokenizer_kept(run: RunDir, cfg: Config) -> None:
    """A run's checkpoints read the pieces of its tokenizer: refuse to start where training
    would make another one (the tokenizer is gone, or tokenizer.json records other
    settings), since the checkpoints could never translate again."""
    fix = "restore it from a copy of the run, or train into a new --run-dir"
    if not run.tokenizer.is_dir():
        raise UserError(
            f"{run.root} has checkpoints but no tokenizer/ (they need the one they were "
            f"trained with); {fix}"
        )
    recorded, own = trained_settings(run.tokenizer), cfg.tokenizer.model_dump()
    if recorded not in (None, own):
        old = recorded if isinstance(recorded, dict) else {}
        changed = sorted(k for k in old.keys() | own.keys() if old.get(k) != own.get(k))
        raise UserError(
            f"{run.tokenizer / SETTINGS} records other settings than the run's config "
            f"({', '.join(changed)}), and a run with checkpoints keeps its tokenizer; {fix}"
        )


def resume_state(run: RunDir, log: logging.Logger) -> tuple[dict, Path] | None:
    """The newest loadable resume checkpoint (`last`, else `previous`) and its path, or None
    for a new run. A corrupt or truncated one is reported and skipped, never silently."""
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
        if "progress" not in state:
            raise UserError(
                f"{path} is not a resume checkpoint (no training progress in it); "
                "move it out of the way or train into a new --run-dir"
            )
        if problems:
            log.warning("resuming from %s (step %d)", path, state["progress"]["step"])
        return state, path
    if problems:
        raise UserError(
            f"no loadable checkpoint to resume {run.root} from: {'; '.join(problems)}; "
            "train into a new --run-dir"
        )
    return None


# What each input a checkpoint records is (Trainer.inputs), for a warning that it changed.
_INPUTS = {"corpus": "the training corpus", "teacher": "the teacher's checkpoint (train.distill)"}


def warn_of_changed_inputs(saved: dict[str, Any], now: dict[str, Any], log: logging.Logger) -> None:
    """A warning for each input of `now` (checkpoint key: value) other than the checkpoint
    `saved` records; one it does not record (a checkpoint of an older run) is not compared."""
    for key, value in now.items():
        if saved.get(key, value) != value:
            log.warning(
                "%s changed since this run started: the rest of the run learns from the new "
                "one, so it will not equal an uninterrupted run",
                _INPUTS[key],
            )
