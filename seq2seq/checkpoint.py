"""The run directory and its checkpoints.

Checkpoints hold tensors and plain data only, are written atomically (temp file, fsync,
rename) so a crash never leaves a half-written file, and load with
`torch.load(weights_only=True)`.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

from seq2seq.errors import UserError


@dataclass(frozen=True)
class RunDir:
    """Where a run keeps everything: see DESIGN.md, "A run directory"."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def meta(self) -> Path:
        return self.root / "meta.json"

    @property
    def log(self) -> Path:
        return self.root / "train.log"

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def valid(self) -> Path:
        return self.root / "valid"

    @property
    def test(self) -> Path:
        return self.root / "test"

    @property
    def attention(self) -> Path:
        return self.root / "attention"

    def checkpoint(self, name: str) -> Path:
        return self.checkpoints / f"{name}.pt"

    def resolve_checkpoint(self, which: str) -> Path:
        """`best`, `last`, `step-N` or a file path -> an existing checkpoint file."""
        path = Path(which) if which.endswith(".pt") else self.checkpoint(which)
        if not path.is_file():
            raise UserError(
                f"no checkpoint {path} in run directory {self.root}; "
                "train it first (seq2seq train) or pass --checkpoint best|last|FILE"
            )
        return path


def atomic_write(path: Path, write: Callable[[BinaryIO], Any]) -> None:
    """Write through a temp file, fsync and rename: readers see the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda handle: handle.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    atomic_write(path, lambda handle: torch.save(state, handle))


def load_checkpoint(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"checkpoint {path} not found")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise UserError(
            f"checkpoint {path} holds pickled objects, refused for safety ({error}); "
            "use a checkpoint written by seq2seq"
        ) from None
    except (RuntimeError, EOFError, OSError) as error:
        raise UserError(f"checkpoint {path} is corrupt or truncated ({error})") from None


def update_best(
    best: list[tuple[float, int]], score: float, step: int, keep: int, higher_is_better: bool
) -> tuple[list[tuple[float, int]], list[int]]:
    """Insert (score, step) into the N-best list -> (new list, steps that fell out).

    The list is ordered best first; a tie keeps the earlier step ahead.
    """
    ranked = sorted(
        [*best, (score, step)],
        key=lambda item: (-item[0] if higher_is_better else item[0], item[1]),
    )
    return ranked[:keep], [s for _, s in ranked[keep:]]


def step_checkpoints(run: RunDir) -> list[Path]:
    """The run's `step-N.pt` checkpoints (the keep_best best), oldest step first."""
    found = []
    for path in run.checkpoints.glob("step-*.pt"):
        step = path.stem.removeprefix("step-")
        if step.isdigit():
            found.append((int(step), path))
    return [path for _, path in sorted(found)]


def average_checkpoints(paths: list[Path]) -> dict[str, Any]:
    """The element-wise mean of the models in `paths`: a checkpoint `translate` can use.

    Floating-point tensors are averaged in float64 and cast back; other tensors (counts,
    flags) must agree and are kept.
    """
    if not paths:
        raise UserError("no checkpoints to average; pass --last N or --checkpoints FILE ...")
    models = [load_checkpoint(path)["model"] for path in paths]
    first = models[0]
    for path, model in zip(paths[1:], models[1:], strict=True):
        for name, tensor in first.items():
            other = model.get(name)
            if other is None or other.shape != tensor.shape:
                raise UserError(
                    f"{path} does not match {paths[0]} at {name}: checkpoints of different "
                    "models cannot be averaged; pick checkpoints of one run"
                )
    averaged = {}
    for name, tensor in first.items():
        if tensor.is_floating_point():
            total = sum(model[name].double() for model in models)
            averaged[name] = (total / len(models)).to(tensor.dtype)
        else:
            averaged[name] = tensor.clone()
    return {"model": averaged, "averaged": [str(path) for path in paths]}
