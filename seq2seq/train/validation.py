"""Validation: teacher-forced loss and perplexity, every metric of `metrics.METRICS` on the
greedy translations (detokenized), and the attention diagnostics
(`train.attention_diagnostics`) over the whole validation set; and where a validation's
outcome goes (the log, the run directory, TensorBoard)."""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from seq2seq.attention.diagnostics import locked_sites, measure_attention
from seq2seq.checkpoint import RunDir
from seq2seq.config import (
    GREEDY_SEARCH,
    VALIDATION_AER,
    VALIDATION_LOSS,
    Config,
    DecodeConfig,
    metric_of,
    validation_metrics,
)
from seq2seq.data.padded_batches import Batch, make_batch, token_batches
from seq2seq.decode.alignment import AlignmentScores, alignment_error_rate
from seq2seq.decode.line_translator import AttentionMap, LineTranslator
from seq2seq.decode.translate import Translator
from seq2seq.files import atomic_write_bytes, atomic_write_text
from seq2seq.metrics import METRICS, score_corpus, scores_line
from seq2seq.models import Seq2Seq
from seq2seq.plots import attention_figure, figure_png
from seq2seq.train.datasets import Datasets, ValidationSet
from seq2seq.train.logs import TensorBoardLog
from seq2seq.train.loss import perplexity, token_cross_entropy

SHOWN_TRANSLATIONS = 5  # the first validation translations TensorBoard shows as text


@dataclass
class ValidationResult:
    # negative log-likelihood per target token, without label smoothing (with several
    # validation sets, the mean of theirs: `losses`)
    loss: float
    # metric key (metrics.METRICS) -> score of the translations; with several validation
    # sets, the mean of their scores, and each one's as PAIR/KEY (fr-en/bleu)
    scores: dict[str, float]
    hypotheses: dict[str, list[str]]  # validation set name (ValidationSet.name) -> its own
    attention_maps: list[AttentionMap]
    # Site -> its diagnostics (see attention.diagnostics); empty when switched off.
    attention: dict[str, dict] = field(default_factory=dict)
    alignment: AlignmentScores | None = None  # against gold, where data.valid_alignments
    losses: dict[str, float] = field(default_factory=dict)  # each set's, where several

    @property
    def perplexity(self) -> float:
        return perplexity(self.loss)

    def metric(self, name: str) -> float:
        """The value of `name`, as `train.metric` names it: a metric's key (a pair's as
        PAIR/KEY), the loss, or the alignment error rate in % (where measured)."""
        if name == VALIDATION_AER:  # measured: the config refuses aer without gold links
            return 100 * self.alignment.aer  # type: ignore[union-attr]
        return self.values[name]

    @property
    def values(self) -> dict[str, float]:
        """Each metric's score by key and the loss (each set's as PAIR/loss, where several)."""
        losses = {f"{name}/{VALIDATION_LOSS}": loss for name, loss in self.losses.items()}
        return {**self.scores, VALIDATION_LOSS: self.loss, **losses}

    def record(self, step: int) -> dict[str, float]:
        """The learning curve's point (`Progress.validations`, summary.json): the step,
        the `values`, and the alignment error rate (in %) where measured."""
        record = {"step": step, **self.values}
        if self.alignment is not None:
            record[VALIDATION_AER] = self.alignment.to_dict()[VALIDATION_AER]
        return record


def higher_is_better(name: str) -> bool:
    """Whether a larger value of `name` (see `ValidationResult.metric`) is better."""
    name = metric_of(name)
    if name in (VALIDATION_LOSS, VALIDATION_AER):
        return False
    return next(metric.higher_is_better for metric in METRICS if metric.key == name)


@dataclass
class _ReadSet:
    """A validation set as the model reads it: its greedy search (into its target
    language), the piece ids of its pairs and their batches."""

    corpus: ValidationSet
    greedy: DecodeConfig
    src_ids: list[list[int]]
    tgt_ids: list[list[int]]
    batches: list[list[int]]


class Validator:
    def __init__(self, cfg: Config, data: Datasets, device: torch.device) -> None:
        self.cfg = cfg
        self.data = data
        self.device = device
        # the first non-empty sources, the same at every validation
        first = [s for s in data.valid[0].src if s.strip()]
        self.heatmap_sources = first[: cfg.train.heatmaps]
        self.sets = [self._read(corpus) for corpus in data.valid]

    def _read(self, corpus: ValidationSet) -> _ReadSet:
        # Greedy: validation runs often, and it ranks checkpoints rather than scoring them.
        search = self.cfg.decode.model_dump() | GREEDY_SEARCH | {"tgt_lang": corpus.tgt_lang}
        greedy = DecodeConfig.model_validate(search)
        # the sources as translation reads them, after their tags (uncut)
        reader = LineTranslator(self.data.tokenizer, greedy, tags=self.cfg.data.source_tags)
        src_ids = reader.source_ids(corpus.src, greedy)[0]
        tgt_ids = self.data.tokenizer.encode_tgt(corpus.ref)
        budget = self.cfg.train.batch_tokens
        batches = token_batches([len(s) for s in src_ids], [len(t) for t in tgt_ids], budget)
        return _ReadSet(corpus, greedy, src_ids, tgt_ids, batches)

    def pairs(self, read: _ReadSet | None = None) -> Iterator[Batch]:
        """The batches of sources and targets of validation set `read` (None: of every
        set), on the device."""
        for one in self.sets if read is None else [read]:
            for group in one.batches:
                src, tgt = [one.src_ids[i] for i in group], [one.tgt_ids[i] for i in group]
                yield make_batch(src, tgt, group).to(self.device)

    @torch.no_grad()
    def teacher_forced_loss(self, model: Seq2Seq, read: _ReadSet | None = None) -> float:
        """The loss per target token of validation set `read` (None: of them all)."""
        total, tokens = 0.0, 0
        for batch in self.pairs(read):
            logits = model(batch.src, batch.src_mask, batch.tgt_in)
            total += token_cross_entropy(logits, batch.tgt_out).item()
            tokens += batch.n_tgt_tokens
        loss = total / max(tokens, 1)
        return loss if math.isfinite(loss) else math.inf  # NaN would not rank against others

    def __call__(self, model: Seq2Seq) -> ValidationResult:
        was_training = model.training
        model.eval()
        tags, first = self.cfg.data.source_tags, self.sets[0].greedy
        translator = Translator(model, self.data.tokenizer, first, self.device, tags=tags)
        losses, scores, hypotheses = {}, {}, {}
        for read in self.sets:
            name = read.corpus.name
            losses[name] = self.teacher_forced_loss(model, read)
            hypotheses[name] = translator.translate(read.corpus.src, tgt_lang=read.corpus.tgt_lang)
            scores[name] = score_corpus(hypotheses[name], read.corpus.ref).values
        found = [translator.attention_map(line) for line in self.heatmap_sources]
        maps = [amap for amap in found if amap is not None]
        diagnostics = self.cfg.train.attention_diagnostics
        attention = measure_attention(model, self.pairs()) if diagnostics else {}
        alignment = None if self.data.valid[0].alignments is None else self.alignments(translator)
        model.train(was_training)
        if len(self.sets) == 1:
            return ValidationResult(losses[""], scores[""], hypotheses, maps, attention, alignment)
        keys = next(iter(scores.values()))  # every set has the same metrics
        mean = {key: statistics.fmean(s[key] for s in scores.values()) for key in keys}
        each = {f"{pair}/{key}": value for pair, s in scores.items() for key, value in s.items()}
        loss = statistics.fmean(losses.values())
        return ValidationResult(loss, mean | each, hypotheses, maps, attention, None, losses)

    def alignments(self, translator: Translator) -> AlignmentScores:
        """The attention's word alignments of the validation pairs, forced on the references
        (as `score --alignments`), scored against the gold ones (one validation set)."""
        corpus = self.data.valid[0]
        sources = corpus.src
        forced = translator.forced(sources, corpus.ref)
        found = [
            translator.alignment(s, t) if t else "" for s, t in zip(sources, forced, strict=True)
        ]
        return alignment_error_rate(found, corpus.alignments)  # type: ignore[arg-type]


def report_validation(
    result: ValidationResult,
    step: int,
    is_best: bool,
    run: RunDir,
    data: Datasets,
    board: TensorBoardLog,
    log: logging.Logger,
) -> None:
    """A validation's translations (RUN/valid/step-N.hyp, or step-N.PAIR.hyp for each of
    several sets), its log lines, its heatmaps (RUN/attention/, TensorBoard) and its scores
    and diagnostics in TensorBoard."""
    for name, hypotheses in result.hypotheses.items():
        path = run.valid / ".".join(filter(None, (f"step-{step}", name, "hyp")))
        atomic_write_text(path, "".join(line + "\n" for line in hypotheses))
    _log_scores(result, step, is_best, log)
    locked = locked_sites(result.attention)
    if locked:
        sites = ", ".join(f"{name} {mass:.2f}" for name, mass in locked.items())
        log.warning(
            "attention locked onto the source's end of sentence at step %d (sink mass: %s): "
            "the weight the target positions put on it, not on words; early in training "
            "it may pass (docs/attention.md#looking-inside-attention-diagnostics)",
            step,
            sites,
        )
    shown, first = SHOWN_TRANSLATIONS, data.valid[0]
    hypotheses = result.hypotheses[first.name]
    board.add_translations(step, first.src[:shown], first.ref[:shown], hypotheses[:shown])
    for i, amap in enumerate(result.attention_maps):
        png = figure_png(attention_figure(amap.weights, amap.src_pieces, amap.tgt_pieces))
        board.add_png(step, f"attention/{i}", png)
        atomic_write_bytes(run.attention / f"step-{step}-{i}.png", png)
    board.add_attention_diagnostics(step, result.attention)
    values = result.values | {"perplexity": result.perplexity}
    aligned = result.alignment
    if aligned is not None:
        rates = aligned.to_dict()
        rated = (VALIDATION_AER, "precision", "recall")
        values |= {f"alignment_{rate}": rates[rate] for rate in rated}
    board.add(step, "valid", values)


def _log_scores(result: ValidationResult, step: int, is_best: bool, log: logging.Logger) -> None:
    """A validation's line in the log, and a line for each of several validation sets
    (the first line's scores are then their mean)."""
    aligned = result.alignment
    log.info(
        "validation at step %d: %s  loss %.4f  ppl %.2f%s%s",
        step,
        scores_line(result.scores),
        result.loss,
        result.perplexity,
        "" if aligned is None else f"  AER {100 * aligned.aer:.2f}",
        "  (new best)" if is_best else "",
    )
    for name, loss in result.losses.items():
        pair = {key: result.scores[f"{name}/{key}"] for key in validation_metrics()[:-1]}
        log.info("  %s: %s  loss %.4f", name, scores_line(pair), loss)
