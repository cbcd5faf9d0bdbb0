"""A trained model from its run directory: the config, the tokenizer and the weights of
one checkpoint, checked against each other, and the longest source translation reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from seq2seq.attention import attention_class
from seq2seq.checkpoint import RunDir, load_checkpoint, load_model_weights
from seq2seq.config import Config
from seq2seq.data.tokenizer import PAD_ID, Tokenizer
from seq2seq.errors import UserError
from seq2seq.models import Seq2Seq, build_model


def max_source_pieces(cfg: Config) -> int:
    """The longest source, in pieces, that translation reads; longer ones are cut.

    Twice the longest training pair: the model never saw more, and beam search's time and
    memory grow with the square of the source (the output limit follows its length and every
    step attends over all of it). An attention type may attend over fewer positions
    (`Attention.max_source_positions`; location attention scores a fixed number).
    """
    limit = 2 * cfg.data.max_len
    for section in cfg.model.attention_sections().values():  # self-attention reads it too
        positions = attention_class(section.type).max_source_positions(section)
        if positions is not None:
            limit = min(limit, positions - 1)  # the source's EOS takes one
    return limit


def check_tokenizer(state: dict, tokenizer: Tokenizer, path: Path, run: RunDir) -> None:
    """Refuse a checkpoint trained with another tokenizer than the run's (checkpoints
    written before they recorded one pass)."""
    recorded = state.get("tokenizer")
    if recorded is not None and recorded != tokenizer.fingerprint:
        raise UserError(
            f"checkpoint {path} was trained with another tokenizer than {run.tokenizer} "
            f"(fingerprint {recorded}, not {tokenizer.fingerprint}); use it with the run "
            "that wrote it (--run)"
        )


INITIAL = "init"  # the checkpoint name of the weights a run started from


@dataclass(frozen=True)
class Origin:
    """Where a loaded model comes from."""

    run: Path
    config: Config
    checkpoint: Path | None  # None: the run's initial weights (INITIAL)
    step: int | None  # the training step the checkpoint saved (None: not recorded)

    @property
    def checkpoint_name(self) -> str:
        return INITIAL if self.checkpoint is None else self.checkpoint.stem


def load_trained_model(run: RunDir, checkpoint: str = "best") -> tuple[Origin, Tokenizer, Seq2Seq]:
    """A run's config and checkpoint, its tokenizer and the model of one of its checkpoints
    (best, last, step-N, a .pt file, or `init`: see `initial_model`), on the CPU in eval
    mode; a checkpoint that does not fit the config or the tokenizer is a `UserError`."""
    cfg = run.load_config()
    path = _ratio_source(run) if checkpoint == INITIAL else run.resolve_checkpoint(checkpoint)
    tokenizer = Tokenizer.load(run.tokenizer)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, PAD_ID)
    state = load_checkpoint(path)
    check_tokenizer(state, tokenizer, path, run)
    load_model_weights(model, state, cfg.model, path)
    if checkpoint == INITIAL:
        origin = Origin(run.root, cfg, None, 0)
        return origin, tokenizer, initial_model(run, cfg, tokenizer, model).eval()
    step = state.get("step") if isinstance(state, dict) else None
    origin = Origin(run.root, cfg, path, step if isinstance(step, int) else None)
    return origin, tokenizer, model.eval()


def _ratio_source(run: RunDir) -> Path:
    """A checkpoint of the run to take the training corpus's length ratio from (any holds
    it), for its initial weights."""
    for name in ("last", "previous", "best"):
        if run.checkpoint(name).is_file():
            return run.checkpoint(name)
    raise UserError(
        f"checkpoint init of {run.root} takes the training corpus's length ratio from one of "
        "the run's checkpoints (last, previous or best), and it has none; train it first "
        "(seq2seq train)"
    )


def initial_model(run: RunDir, cfg: Config, tokenizer: Tokenizer, trained: Seq2Seq) -> Seq2Seq:
    """The weights `run` started training from, drawn again as training drew them
    (`torch.manual_seed(cfg.seed)`, then the model; the caller's random state is left as
    it was), with the training corpus's length ratio of the `trained` model: the ratio is
    not learned, and location-based attention reads it. A fine-tuned run started from its
    parent's weights, not from a draw: a `UserError`."""
    if cfg.train.init_from is not None:
        raise UserError(
            f"run {run.root} started from the weights of train.init_from "
            f"({cfg.train.init_from}), not from a draw of its own; load that checkpoint instead"
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, PAD_ID)
    model.length_ratio.copy_(trained.length_ratio)
    return model
