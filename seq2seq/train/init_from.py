"""Fine-tuning: a new run that starts from another run's weights and tokenizer
(`train.init_from`), with a fresh optimizer, schedule and step count, on any data.

Only a new run reads its parent: a resumed fine-tuning run resumes from its own
checkpoints, so the parent may have moved or gone by then.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from seq2seq.checkpoint import RunDir, load_checkpoint, load_model_weights
from seq2seq.config import Config, ModelConfig, config_differences
from seq2seq.data.corpus_encoder import DERIVED
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decode.loading import check_tokenizer
from seq2seq.errors import UserError
from seq2seq.files import publish_directory

# What a child may change of its parent's model and tokenizer sections: nothing that
# shapes the weights or the vocabulary.
FREE_MODEL_FIELDS = {f"model.{name}" for name in ModelConfig.TRAINING_ONLY}


@dataclass(frozen=True)
class Parent:
    run: RunDir
    checkpoint: Path

    @classmethod
    def find(cls, where: str) -> Parent:
        """A run directory (its best checkpoint) or a checkpoint file inside one."""
        path = Path(where)
        if path.is_dir():
            run = RunDir(path)
        elif path.is_file() and path.suffix == ".pt":
            run = RunDir(path.parent.parent)  # RUN/checkpoints/NAME.pt
        elif path.is_file():
            raise UserError(
                f"train.init_from {where} is a file but not a checkpoint (.pt); give the run "
                f"directory ({path.parent}) or a .pt file in its checkpoints/"
            )
        else:
            raise UserError(
                f"train.init_from {where}: no such run directory or checkpoint file; give "
                "a trained run directory (its best checkpoint) or a .pt file in one"
            )
        if not run.config.is_file() or not run.tokenizer.is_dir():
            raise UserError(
                f"train.init_from {where}: {run.root} is not a run directory (no config.yaml "
                "or tokenizer/); give a trained run directory or a checkpoint inside one"
            )
        return cls(run, path if path.is_file() else _best(run, where))

    def check_fits(self, cfg: Config) -> None:
        """The child's model and tokenizer sections must be the parent's (dropout aside)."""
        differing = [
            (field, old, new)
            for field, old, new in config_differences(self.run.load_config(), cfg)
            if field.startswith(("model.", "tokenizer.")) and field not in FREE_MODEL_FIELDS
        ]
        if differing:
            shown = "; ".join(f"{k}: {old!r} -> {new!r}" for k, old, new in differing[:3])
            raise UserError(
                f"train.init_from {self.run.root}: this config's model or tokenizer differs "
                f"from the parent's ({shown}); fine-tuning keeps them: start the config "
                f"with `extends: {self.run.config}` and change only data and train"
            )

    def copy_tokenizer(self, run: RunDir) -> None:
        """The parent's tokenizer models and settings, without its corpus id cache."""
        if not run.tokenizer.is_dir():
            publish_directory(
                run.tokenizer,
                lambda tmp: shutil.copytree(
                    self.run.tokenizer, tmp, ignore=shutil.ignore_patterns(*DERIVED)
                ),
            )

    def load_weights(self, model: torch.nn.Module, cfg: Config, tokenizer: Tokenizer) -> None:
        state = load_checkpoint(self.checkpoint)
        check_tokenizer(state, tokenizer, self.checkpoint, self.run)
        load_model_weights(model, state, cfg.model, self.checkpoint)

    def record(self) -> dict[str, str]:
        """What meta.json keeps of the parent: where it was and which weights it gave."""
        digest = hashlib.sha256()
        with open(self.checkpoint, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        return {
            "run": str(self.run.root),
            "checkpoint": str(self.checkpoint),
            "sha256": digest.hexdigest(),
        }


def _best(run: RunDir, where: str) -> Path:
    """The run's best checkpoint; a run without one (still in its first validation) names
    the checkpoints it has."""
    best = run.checkpoint("best")
    if best.is_file():
        return best
    others = sorted(path.name for path in run.checkpoints.glob("*.pt"))
    choice = (
        f"name one of its checkpoints ({', '.join(others[:4])}): "
        f"train.init_from={run.checkpoints}/{others[0]}"
        if others
        else "train it first"
    )
    raise UserError(f"train.init_from {where}: {run.root} has no best checkpoint yet; {choice}")
