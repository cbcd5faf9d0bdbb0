"""Ensembles: several trained models that decode as one.

`Ensemble` is a `Seq2Seq` to the searches and to forced scoring. Each member encodes the
source and steps its own decoder as it would alone (any architecture, any attention type),
and the ensemble's log-probability of the next piece is the mean of the members':

    log p_E(y_t | y_<t, x) = (1 / M) * sum_{m=1..M} log p_m(y_t | y_<t, x),

each log p_m a log-softmax over the one target vocabulary they share. The mean is not
renormalised, so the ensemble's log-probability of a whole output is the mean of the
members' (log P_E(y | x) = (1 / M) * sum_m log P_m(y | x)): what forced scoring gives, and
what the search ranks. A step's attention weights are the first member's; the others
form none.

Members must read and write the same pieces: `load_models` refuses runs trained with
different tokenizers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from seq2seq.checkpoint import RunDir
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decode.loading import Origin, load_trained_model, max_source_pieces
from seq2seq.errors import UserError
from seq2seq.models.base import DecoderState, Memory, Seq2Seq, Step


@dataclass
class EnsembleMemory:
    """Each member's encoded source, kept and widened together (the `Memory` calls that a
    search makes)."""

    parts: tuple[Memory, ...]

    @property
    def beam(self) -> int:
        return self.parts[0].beam

    def index_select(self, index: Tensor) -> EnsembleMemory:
        return EnsembleMemory(tuple(part.index_select(index) for part in self.parts))

    def widened(self, beam: int) -> EnsembleMemory:
        return EnsembleMemory(tuple(part.widened(beam) for part in self.parts))


@dataclass
class EnsembleState:
    """Each member's decoder state, reordered together."""

    parts: tuple[DecoderState, ...]

    def index_select(self, index: Tensor) -> EnsembleState:
        return EnsembleState(tuple(part.index_select(index) for part in self.parts))


def mean_log_probs(log_probs: list[Tensor]) -> Tensor:
    """The element-wise mean, in float32 (of one tensor: that tensor, exactly)."""
    return torch.stack([x.float() for x in log_probs]).mean(0)


class Ensemble(Seq2Seq):
    """Members that decode as one model (see the module)."""

    def __init__(self, members: list[Seq2Seq]) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one member")
        super().__init__()
        self.members = nn.ModuleList(members)

    def encode(self, src: Tensor, src_mask: Tensor) -> EnsembleMemory:  # type: ignore[override]
        return EnsembleMemory(tuple(member.encode(src, src_mask) for member in self.members))

    def init_state(self, memory: EnsembleMemory) -> EnsembleState:  # type: ignore[override]
        pairs = zip(self.members, memory.parts, strict=True)
        return EnsembleState(tuple(member.init_state(part) for member, part in pairs))

    def decode_step(  # type: ignore[override]
        self,
        memory: EnsembleMemory,
        state: EnsembleState,
        prev_tokens: Tensor,
        need_weights: bool = True,
    ) -> Step:
        members = zip(self.members, memory.parts, state.parts, strict=True)
        steps = [
            member.decode_step(part, own, prev_tokens, need_weights and i == 0)
            for i, (member, part, own) in enumerate(members)
        ]
        log_probs = mean_log_probs([step.log_probs for step in steps])
        return Step(log_probs, EnsembleState(tuple(s.state for s in steps)), steps[0].attention)

    def log_probs(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        return mean_log_probs([member.log_probs(src, src_mask, tgt_in) for member in self.members])


@dataclass(frozen=True)
class Loaded:
    """What translating with one or more trained models needs."""

    origin: Origin  # the first model's: its run's decode section and device are the defaults
    tokenizer: Tokenizer
    model: Seq2Seq  # the one model, or an `Ensemble` of several
    max_source: int  # the longest source every model reads (`max_source_pieces`)


def pair_members(runs: list[Path], checkpoints: list[str]) -> list[tuple[Path, str]]:
    """Each model's run and checkpoint: one checkpoint of every run, several of one run, or
    the i-th checkpoint of the i-th run."""
    if len(checkpoints) == 1:
        return [(run, checkpoints[0]) for run in runs]
    if len(runs) == 1:
        return [(runs[0], checkpoint) for checkpoint in checkpoints]
    if len(runs) == len(checkpoints):
        return list(zip(runs, checkpoints, strict=True))
    raise UserError(
        f"{len(runs)} runs but {len(checkpoints)} checkpoints: name one checkpoint for all "
        "the runs, one per run, or several checkpoints of one run"
    )


def load_models(runs: list[Path], checkpoints: list[str]) -> Loaded:
    """The models of `pair_members(runs, checkpoints)` (one or more), as one model: the
    model itself where there is one, else their `Ensemble`; models trained with different
    tokenizers are a `UserError`."""
    (run, checkpoint), *others = pair_members(runs, checkpoints)
    origin, tokenizer, model = load_trained_model(RunDir(Path(run)), checkpoint)
    members, max_source = [model], max_source_pieces(origin.config)
    for run, checkpoint in others:
        own_origin, own_tokenizer, model = load_trained_model(RunDir(Path(run)), checkpoint)
        if own_tokenizer.fingerprint != tokenizer.fingerprint:
            raise UserError(
                f"{run} was trained with another tokenizer than {origin.run} (fingerprint "
                f"{own_tokenizer.fingerprint}, not {tokenizer.fingerprint}): an ensemble "
                "averages over one vocabulary; ensemble runs that share a tokenizer "
                "(tokenizer.model)"
            )
        if own_origin.config.data.source_tags != origin.config.data.source_tags:
            raise UserError(
                f"{run} reads other tags before its sources than {origin.run} (data.tags, "
                "data.target_tags): every model of an ensemble reads the same source; "
                "ensemble runs trained with the same tags"
            )
        members.append(model)
        max_source = min(max_source, max_source_pieces(own_origin.config))
    model = members[0] if len(members) == 1 else Ensemble(members).eval()
    return Loaded(origin, tokenizer, model, max_source)
