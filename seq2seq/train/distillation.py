"""Word-level knowledge distillation (`train.distill`; Hinton et al., 2015; Kim and Rush,
2016): a trained teacher, in evaluation mode in the training process, gives its
distribution over each next target piece of every batch, and the student learns from it as
well as from the reference. Sequence-level distillation, training on the teacher's
translations, is `seq2seq distill` (distilled_corpus.py)."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from torch import Tensor

from seq2seq.checkpoint import RunDir
from seq2seq.config import Config, CorpusSpec, DataConfig, DistillConfig, describe_corpus
from seq2seq.data.prepared_corpus import file_sha256
from seq2seq.data.tokenizer import PAD_ID, Tokenizer
from seq2seq.decode.ensemble import load_models, pair_members
from seq2seq.errors import UserError
from seq2seq.models.base import Seq2Seq


def distillation_loss(
    student_logits: Tensor, teacher_log_probs: Tensor, targets: Tensor, top_k: int, t: float
) -> Tensor:
    """The summed KL divergence, over the target positions that are not padding, from the
    teacher's distribution p to the student's q, both softened by temperature t:

        t^2 * sum over v in K of p_v (log p_v - log q_v),

    p_v = softmax(log p_T / t) over K, the teacher's k most probable pieces (renormalised
    over them: 0 elsewhere), q = softmax(z / t) over the whole vocabulary, z the student's
    logits. Its gradient in z is t (q - p) per position, the usual KD gradient."""
    top, pieces = (teacher_log_probs.float() / t).topk(top_k, dim=-1)
    log_p = top.log_softmax(-1)
    log_q = (student_logits.float() / t).log_softmax(-1).gather(-1, pieces)
    per_position = (log_p.exp() * (log_p - log_q)).sum(-1)
    return (per_position * (targets != PAD_ID)).sum() * t**2


class Teacher:
    """The teacher's model (one run, or an ensemble of several) and how its distribution
    enters the loss; it keeps the seconds its forward passes took, for the log."""

    def __init__(self, model: Seq2Seq, settings: DistillConfig, identity: list[str]) -> None:
        self.model = model.eval()
        self.settings = settings
        self.identity = identity  # the checkpoint files' SHA-256, checked on a resume
        self.seconds = 0.0  # of its forward passes on a CPU, since `share` last read them
        self.timed: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []  # on a GPU: those

    @torch.no_grad()
    def log_probs(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        if src.device.type != "cuda":
            started = time.perf_counter()
            found = self.model.log_probs(src, src_mask, tgt_in)
            self.seconds += time.perf_counter() - started
            return found
        # Timed by events on the GPU's stream: the host does not wait for the work here.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        found = self.model.log_probs(src, src_mask, tgt_in)
        end.record()
        self.timed.append((start, end))
        return found

    def mixed_loss(self, loss: Tensor, logits: Tensor, taught: Tensor, targets: Tensor) -> Tensor:
        """(1 - lambda) `loss` + lambda x the distillation loss of the student's `logits`
        against the teacher's log-probabilities `taught` (`log_probs`) of `targets`, both
        summed over tokens."""
        settings = self.settings
        kd = distillation_loss(logits, taught, targets, settings.top_k, settings.temperature)
        return (1 - settings.weight) * loss + settings.weight * kd

    def share(self, since: float) -> str:
        """The share of the time since `since` (time.time()) its forward passes took, for
        the log line; counted afresh from here."""
        for start, end in self.timed:
            end.synchronize()  # done by now: the log line follows a settled update
            self.seconds += start.elapsed_time(end) / 1000
        share = self.seconds / max(time.time() - since, 1e-9)
        self.seconds, self.timed = 0.0, []
        return f"  teacher {100 * share:.0f}% of the time"


def check_teacher(cfg: Config) -> None:
    """One line, before the student's data is prepared, where its teacher (train.distill)
    cannot teach it: not trained on a pair of the student's corpora, other tags before its
    sources (data.tags, a target language's tag), or fewer target pieces than top_k."""
    settings = cfg.train.distill
    if settings is None:
        return
    first = Path(settings.teachers[0])
    run = RunDir(first)
    taught = run.load_config().data
    for corpus in cfg.data.train_corpora:
        teacher_target(first, taught, corpus, cfg.data.pair(corpus))
    if taught.source_tags != cfg.data.source_tags:
        raise UserError(
            f"train.distill: {first} reads other tags before its sources than the student "
            "(data.tags, or the target language's tag of a run into several): it would "
            "teach for sources it was not trained on; distill with a teacher of the same tags"
        )
    pieces = Tokenizer.load(run.tokenizer).tgt_vocab_size
    if settings.top_k > pieces:
        raise UserError(
            f"train.distill.top_k {settings.top_k} is more than the {pieces} target pieces; "
            f"give at most {pieces}"
        )


def load_teacher(cfg: Config, tokenizer: Tokenizer, device: torch.device) -> Teacher | None:
    """The teacher of the student's `cfg` (train.distill; None without) on `device`, as
    `check_teacher` passed it; one line where it reads or writes other pieces than the
    student (`tokenizer`)."""
    settings = cfg.train.distill
    if settings is None:
        return None
    # Building a model draws its initial weights: the student's random stream stays its own.
    with torch.random.fork_rng(devices=[]):
        loaded = load_models([Path(run) for run in settings.teachers], [settings.checkpoint])
    first, theirs = settings.teachers[0], loaded.tokenizer
    for side, ours, its in (
        ("target", tokenizer.tgt_vocabulary(), theirs.tgt_vocabulary()),
        ("source", tokenizer.src_vocabulary(), theirs.src_vocabulary()),
    ):
        if ours != its:
            raise UserError(
                f"train.distill: {first} has another {side} vocabulary than the "
                f"student ({len(its)} pieces, not {len(ours)}, or other ones): a teacher's "
                "distribution is over its pieces; give the student its tokenizer "
                f"(tokenizer.model: {Path(first) / 'tokenizer'})"
            )
    return Teacher(loaded.model.to(device), settings, _identity(settings))


def _identity(settings: DistillConfig) -> list[str]:
    """The SHA-256 of each teacher's checkpoint file: what a resumed run must learn from."""
    members = pair_members([Path(run) for run in settings.teachers], [settings.checkpoint])
    return [file_sha256(RunDir(run).resolve_checkpoint(name)) for run, name in members]


def teacher_target(
    teacher: Path, data: DataConfig, corpus: CorpusSpec, langs: tuple[str, str]
) -> str | None:
    """The tgt_lang that makes the `teacher` (trained on `data`) translate a corpus of
    `langs` into its target: the language, for a teacher trained into several, else None;
    one line where it does not translate from its source language or into its target."""
    sources = list(dict.fromkeys(data.pair(trained)[0] for trained in data.train_corpora))
    tags = data.source_tags
    into = tags.targets or tags.languages
    if langs[0] not in sources or langs[1] not in into:
        raise UserError(
            f"{describe_corpus(corpus)} is {langs[0]}-{langs[1]}, and the teacher "
            f"{teacher} translates from {', '.join(sources)} into {', '.join(into)}: "
            "distill with a teacher of its pair"
        )
    return langs[1] if tags.targets else None
