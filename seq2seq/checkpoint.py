"""The run directory and its checkpoints.

Checkpoints hold tensors and plain data only, are written atomically (temp file, fsync,
rename) so a crash never leaves a half-written file, and load with
`torch.load(weights_only=True)`.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import re
import socket
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seq2seq.config import Config, ModelConfig, flatten, load_config
from seq2seq.errors import UserError
from seq2seq.files import atomic_write

# The end of every message about a checkpoint that does not fit the model.
_FIT_FIX = "use the run's own config.yaml or a checkpoint of this run"


@dataclass(frozen=True)
class RunDir:
    """Where a run keeps everything (docs/architecture.md, "The run directory")."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def meta(self) -> Path:
        return self.root / "meta.json"

    @property
    def summary(self) -> Path:
        """Steps, best step, time, throughput, parameters and the validation curve."""
        return self.root / "summary.json"

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

    @property
    def best_attention(self) -> Path:
        """The heatmap a sweep report draws of this run, kept for reports without checkpoints."""
        return self.root / "best-attention.json"

    @property
    def initial_attention(self) -> Path:
        """The attention diagnostics of its initial weights that a sweep report measured,
        kept for reports without checkpoints."""
        return self.root / "init-attention.json"

    def test_hypotheses(self, name: str) -> Path:
        """test/NAME.hyp, the translation of test set NAME. Runs trained before that name
        wrote test/NAME.TGT, which is read where it is the one there."""
        path = self.test / f"{name}.hyp"
        if path.is_file() or not self.config.is_file():
            return path
        older = self.test / f"{name}.{self.load_config().data.tgt}"
        return older if older.is_file() else path

    def load_config(self) -> Config:
        """The run's resolved config (`config.yaml`), as training wrote it."""
        if not self.config.is_file():
            raise UserError(f"{self.root} is not a run directory (no config.yaml); train one first")
        try:
            return load_config(self.config)
        except UserError as error:
            if str(error).startswith(str(self.config)):
                raise
            # Validation problems name the field only; here the user did not name the file.
            raise UserError(f"{self.config}: {error}") from None

    @property
    def lock(self) -> Path:
        """Locked by the process training the run (see `training_lock`)."""
        return self.root / ".lock"

    def checkpoint(self, name: str) -> Path:
        return self.checkpoints / f"{name}.pt"

    def has_checkpoints(self) -> bool:
        return any(self.checkpoints.glob("*.pt"))

    def resolve_checkpoint(self, which: str) -> Path:
        """`best`, `last`, `step-N` or a file path -> an existing checkpoint file."""
        path = Path(which) if which.endswith(".pt") else self.checkpoint(which)
        if not path.is_file():
            raise UserError(
                f"no checkpoint {path} in run directory {self.root}; "
                "train it first (seq2seq train) or name another checkpoint: best, last, step-N "
                "or a .pt file"
            )
        return path


class RunBusy(UserError):
    """Another process is training the run."""

    @classmethod
    def of(cls, run: RunDir, holder: str) -> RunBusy:
        """The refusal of `run`, which `holder` (its lock's words) is training."""
        return cls(
            f"{run.root} is being trained by {holder}; let it finish (or stop it) and run the "
            "same command again"
        )


@contextmanager
def training_lock(run: RunDir) -> Iterator[None]:
    """Hold the run's lock while training it, so that a second process on the same run (a
    sweep started twice, a `train` repeated in another terminal) is refused, told which
    process holds it. The kernel releases the lock when its holder dies: a killed run
    resumes with no stale lock to remove."""
    try:
        run.root.mkdir(parents=True, exist_ok=True)
        handle = open(run.lock, "a+", encoding="utf-8")  # held until the exit
    except OSError as error:
        raise UserError(
            f"cannot create run directory {run.root} ({error.strerror}); pass another --run-dir"
        ) from None
    with handle:
        if not _take(handle, fcntl.LOCK_EX, _LOCK_TRIES):
            handle.seek(0)
            raise RunBusy.of(run, handle.read().strip() or "another process")
        handle.truncate(0)
        handle.write(f"process {os.getpid()} on {socket.gethostname()}\n")
        handle.flush()
        yield


# A look at the lock (`lock_holder`: a sweep's status) holds it for an instant: a run that
# starts then tries again rather than take it for another training process.
_LOCK_TRIES = 5
_LOCK_WAIT_S = 0.1


def _take(handle: Any, mode: int, tries: int = 1) -> bool:
    """Whether `handle`'s lock was taken in `mode` without waiting on its holder."""
    for attempt in range(tries):
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt + 1 < tries:
                time.sleep(_LOCK_WAIT_S)
    return False


def lock_holder(run: RunDir) -> str | None:
    """The process training the run now, as its lock names it; None where none is."""
    try:
        handle = open(run.lock, encoding="utf-8")
    except OSError:  # no lock: never trained, or not readable here
        return None
    with handle:
        if _take(handle, fcntl.LOCK_SH):
            return None  # released as the handle closes
        return handle.read().strip() or "another process"


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    atomic_write(path, lambda handle: torch.save(state, handle))


def load_checkpoint(path: Path, mapped: bool = False) -> dict[str, Any]:
    """A checkpoint's entries; `mapped`: its tensors mapped from the file rather than read,
    for a quick look at the small entries (the progress) of a large one."""
    if not path.is_file():
        raise UserError(f"checkpoint {path} not found")
    try:
        # torch warns before failing on a file that is not a zip archive (raw pickle): the
        # one error line below says it all.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mapped)
    except Exception as error:  # noqa: BLE001 - torch reports a damaged file in many ways
        problem = error
    # torch's message on a refused class is a page of advice; the class is what matters.
    refused = re.search(r"GLOBAL ([\w.]+)", str(problem))
    if isinstance(problem, pickle.UnpicklingError) and refused:
        raise UserError(
            f"checkpoint {path} holds pickled objects ({refused.group(1)}), refused for safety; "
            "use a checkpoint written by seq2seq"
        )
    # Other messages (a KeyError, a zip reader's internals) would not help the user.
    raise UserError(
        f"checkpoint {path} is corrupt or truncated (not a whole file written by torch.save); "
        "use another checkpoint"
    )


def model_weights(state: Any, path: Path, merged: bool = True) -> dict[str, torch.Tensor]:
    """The parameters (`state["model"]`) of a loaded checkpoint. A LoRA run's checkpoint
    holds its adapters and names its base (`state["lora"]`: the frozen weights, a file
    beside it): with `merged`, the base's weights with the adapters' updates added
    (`merged_weights`), what a plain model loads; else the base's and the adapters', what
    the adapted model loads."""
    weights = state.get("model") if isinstance(state, dict) else None
    if not isinstance(weights, dict):
        raise UserError(
            f"checkpoint {path} holds no model parameters; use a checkpoint written by seq2seq"
        )
    adapters = state.get("lora")
    if adapters is None:
        return weights
    base_path = path.parent / adapters["base"]
    if not base_path.is_file():
        raise UserError(
            f"checkpoint {path} holds LoRA adapters of {base_path}, which is gone; "
            "put the run's checkpoints/ back whole"
        )
    base_state = load_checkpoint(base_path)
    if isinstance(base_state, dict) and "lora" in base_state:
        raise UserError(
            f"checkpoint {path} names {base_path} as its base, which holds adapters itself; "
            "put the run's own base.pt back"
        )
    base = model_weights(base_state, base_path)
    return merged_weights(base, weights, adapters["scale"]) if merged else base | weights


def merged_weights(
    base: dict[str, torch.Tensor], adapters: dict[str, torch.Tensor], scale: float
) -> dict[str, torch.Tensor]:
    """`base` with each adapted weight W made W + scale B A (`models.lora`), computed as
    the adapted layer merges itself, so that both give the same floats."""
    weights = dict(base)
    for name, lora_a in adapters.items():
        if name.endswith(".lora_a"):
            layer = name.removesuffix(".lora_a")
            lora_b, weight = adapters[f"{layer}.lora_b"], base[f"{layer}.weight"]
            weights[f"{layer}.weight"] = weight + scale * lora_b @ lora_a
    return weights


def load_model_weights(
    model: torch.nn.Module,
    state: dict[str, Any],
    model_cfg: ModelConfig,
    path: Path,
    merged: bool = True,
) -> None:
    """Load `state["model"]` into `model`. A checkpoint whose recorded model config
    (`state["model_config"]`) differs from `model_cfg` is a `UserError` naming the fields,
    even where the shapes match (heads 4 -> 2, another attention type's weights); one
    written before checkpoints recorded it is checked by its shapes: the first parameter
    that differs, and both shapes. A checkpoint with a NaN or infinite weight is refused,
    naming it. `merged`: as `model_weights` reads a LoRA checkpoint."""
    weights = model_weights(state, path, merged)
    why = _config_misfit(state.get("model_config"), model_cfg)
    if why is None:
        try:
            model.load_state_dict(weights)
        except RuntimeError as error:
            why = _weights_misfit(model, weights, error)
    if why is not None:
        raise UserError(f"checkpoint {path} does not fit this model: {why}")
    broken = next(
        (k for k, w in weights.items() if w.is_floating_point() and not w.isfinite().all()), None
    )
    if broken is not None:  # it would translate every line to nothing, silently
        raise UserError(
            f"checkpoint {path} has non-finite weights ({broken}); use another checkpoint of "
            "the run (best, last or step-N)"
        )


def _config_misfit(saved: Any, model_cfg: ModelConfig) -> str | None:
    """The fields of the recorded model config that differ from `model_cfg`, leaving out
    those that do not change what the weights compute (dropout). Fields added to the
    schema after the checkpoint was written count at their defaults, as its config
    would load today."""
    if not isinstance(saved, dict):
        return None
    defaults = flatten(ModelConfig().model_dump(mode="json"), "model.")
    old = defaults | flatten(saved, "model.")
    new = flatten(model_cfg.model_dump(mode="json"), "model.")
    free = {f"model.{name}" for name in ModelConfig.TRAINING_ONLY}
    differ = [
        f"{k}: checkpoint {old[k]!r}, config {new[k]!r}"
        for k in sorted(new.keys() - free)
        if old[k] != new[k]
    ]
    return f"{'; '.join(differ)}; {_FIT_FIX}" if differ else None


def _weights_misfit(
    model: torch.nn.Module, weights: dict[str, torch.Tensor], error: RuntimeError
) -> str:
    expected = model.state_dict()
    for name, tensor in expected.items():
        if name not in weights:
            return f"the checkpoint lacks parameter {name}; {_FIT_FIX}"
        shape, wanted = tuple(weights[name].shape), tuple(tensor.shape)
        if shape == wanted:
            continue
        if _is_vocabulary(model, name) and shape[1:] == wanted[1:]:
            return (
                f"the vocabulary differs at {name} ({shape[0]} pieces in the checkpoint, "
                f"{wanted[0]} in the tokenizer); use the tokenizer of the run that wrote it"
            )
        return f"{name} has shape {shape} in the checkpoint but {wanted} here; {_FIT_FIX}"
    extra = next((name for name in weights if name not in expected), None)
    if extra is not None:
        return f"the checkpoint has parameter {extra}, which this model lacks; {_FIT_FIX}"
    return f"{str(error).splitlines()[0]}; {_FIT_FIX}"


def _is_vocabulary(model: torch.nn.Module, name: str) -> bool:
    """Whether parameter `name` has a row per vocabulary piece: an embedding or the output."""
    module = model.get_submodule(name.rpartition(".")[0])
    return isinstance(module, torch.nn.Embedding) or name.endswith("output.weight")


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
        raise UserError(
            "no checkpoints to average; pass --last N or --checkpoints NAME per checkpoint"
        )
    states = [load_checkpoint(path) for path in paths]
    models = [model_weights(state, path) for state, path in zip(states, paths, strict=True)]
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
    # The first checkpoint's model section: all of them passed the shape check above.
    config = {"model_config": states[0]["model_config"]} if "model_config" in states[0] else {}
    return {"model": averaged, **config, "averaged": [str(path) for path in paths]}
