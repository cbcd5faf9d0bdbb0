"""Validation: teacher-forced loss and perplexity, every metric of `metrics.METRICS` on the
greedy translations (detokenized), and the attention diagnostics
(`train.attention_diagnostics`) over the whole validation set; and where a validation's
outcome goes (the log, the run directory, TensorBoard)."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from seq2seq.attention.diagnostics import locked_sites, measure_attention
from seq2seq.checkpoint import RunDir
from seq2seq.config import GREEDY_SEARCH, VALIDATION_AER, VALIDATION_LOSS, Config, DecodeConfig
from seq2seq.data.padded_batches import Batch, make_batch, token_batches
from seq2seq.decode.alignment import AlignmentScores, alignment_error_rate
from seq2seq.decode.line_translator import AttentionMap, LineTranslator
from seq2seq.decode.translate import Translator
from seq2seq.files import atomic_write_bytes, atomic_write_text
from seq2seq.metrics import METRICS, score_corpus, scores_line
from seq2seq.models import Seq2Seq
from seq2seq.plots import attention_figure, figure_png
from seq2seq.train.datasets import Datasets
from seq2seq.train.logs import TensorBoardLog
from seq2seq.train.loss import perplexity, token_cross_entropy

SHOWN_TRANSLATIONS = 5  # the first validation translations TensorBoard shows as text


@dataclass
class ValidationResult:
    loss: float  # negative log-likelihood per target token, without label smoothing
    scores: dict[str, float]  # metric key (metrics.METRICS) -> score of the translations
    hypotheses: list[str]
    attention_maps: list[AttentionMap]
    # Site -> its diagnostics (see attention.diagnostics); empty when switched off.
    attention: dict[str, dict] = field(default_factory=dict)
    alignment: AlignmentScores | None = None  # against gold, where data.valid_alignments

    @property
    def perplexity(self) -> float:
        return perplexity(self.loss)

    def metric(self, name: str) -> float:
        """The value of `name`, as `train.metric` names it: a metric's key, the loss, or
        the alignment error rate in % (where measured)."""
        if name == VALIDATION_AER:  # measured: the config refuses aer without gold links
            return 100 * self.alignment.aer  # type: ignore[union-attr]
        return self.loss if name == VALIDATION_LOSS else self.scores[name]

    def record(self, step: int) -> dict[str, float]:
        """The learning curve's point (`Progress.validations`, summary.json): the step,
        each metric's score by key, the loss, and the alignment error rate (in %) where
        measured."""
        record = {"step": step, **self.scores, VALIDATION_LOSS: self.loss}
        if self.alignment is not None:
            record[VALIDATION_AER] = self.alignment.to_dict()[VALIDATION_AER]
        return record


def higher_is_better(name: str) -> bool:
    """Whether a larger value of `name` (see `ValidationResult.metric`) is better."""
    if name in (VALIDATION_LOSS, VALIDATION_AER):
        return False
    return next(metric.higher_is_better for metric in METRICS if metric.key == name)


class Validator:
    def __init__(self, cfg: Config, data: Datasets, device: torch.device) -> None:
        self.cfg = cfg
        self.data = data
        self.device = device
        # the first non-empty sources, the same at every validation
        self.heatmap_sources = [s for s in data.valid_src if s.strip()][: cfg.train.heatmaps]
        # the sources as translation reads them, after decode.tag (uncut)
        reader = LineTranslator(data.tokenizer, cfg.decode, tags=cfg.data.tag_names)
        self.src_ids = reader.source_ids(data.valid_src, cfg.decode.tag)[0]
        self.tgt_ids = data.tokenizer.encode_tgt(data.valid_ref)
        # Greedy: validation runs often, and it ranks checkpoints rather than scoring them.
        self.greedy = DecodeConfig.model_validate(cfg.decode.model_dump() | GREEDY_SEARCH)
        self.batches = token_batches(
            [len(s) for s in self.src_ids], [len(t) for t in self.tgt_ids], cfg.train.batch_tokens
        )

    def pairs(self) -> Iterator[Batch]:
        """The validation set's batches of sources and targets, on the device."""
        for group in self.batches:
            src, tgt = [self.src_ids[i] for i in group], [self.tgt_ids[i] for i in group]
            yield make_batch(src, tgt, group).to(self.device)

    @torch.no_grad()
    def teacher_forced_loss(self, model: Seq2Seq) -> float:
        total, tokens = 0.0, 0
        for batch in self.pairs():
            logits = model(batch.src, batch.src_mask, batch.tgt_in)
            total += token_cross_entropy(logits, batch.tgt_out).item()
            tokens += batch.n_tgt_tokens
        loss = total / max(tokens, 1)
        return loss if math.isfinite(loss) else math.inf  # NaN would not rank against others

    def __call__(self, model: Seq2Seq) -> ValidationResult:
        was_training = model.training
        model.eval()
        loss = self.teacher_forced_loss(model)
        tags = self.cfg.data.tag_names
        translator = Translator(model, self.data.tokenizer, self.greedy, self.device, tags=tags)
        hypotheses = translator.translate(self.data.valid_src)
        scores = score_corpus(hypotheses, self.data.valid_ref)
        found = [translator.attention_map(line) for line in self.heatmap_sources]
        maps = [amap for amap in found if amap is not None]
        diagnostics = self.cfg.train.attention_diagnostics
        attention = measure_attention(model, self.pairs()) if diagnostics else {}
        alignment = None if self.data.valid_alignments is None else self.alignments(translator)
        model.train(was_training)
        return ValidationResult(loss, scores.values, hypotheses, maps, attention, alignment)

    def alignments(self, translator: Translator) -> AlignmentScores:
        """The attention's word alignments of the validation pairs, forced on the references
        (as `score --alignments`), scored against the gold ones."""
        sources = self.data.valid_src
        forced = translator.forced(sources, self.data.valid_ref)
        found = [
            translator.alignment(s, t) if t else "" for s, t in zip(sources, forced, strict=True)
        ]
        return alignment_error_rate(found, self.data.valid_alignments)


def report_validation(
    result: ValidationResult,
    step: int,
    is_best: bool,
    run: RunDir,
    data: Datasets,
    board: TensorBoardLog,
    log: logging.Logger,
) -> None:
    """A validation's translations (RUN/valid/step-N.hyp), its log line, its heatmaps
    (RUN/attention/, TensorBoard) and its scores and diagnostics in TensorBoard."""
    atomic_write_text(
        run.valid / f"step-{step}.hyp", "".join(line + "\n" for line in result.hypotheses)
    )
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
    shown = SHOWN_TRANSLATIONS
    board.add_translations(step, data.valid_src[:shown], data.valid_ref[:shown], result.hypotheses)
    for i, amap in enumerate(result.attention_maps):
        png = figure_png(attention_figure(amap.weights, amap.src_pieces, amap.tgt_pieces))
        board.add_png(step, f"attention/{i}", png)
        atomic_write_bytes(run.attention / f"step-{step}-{i}.png", png)
    board.add_attention_diagnostics(step, result.attention)
    values = {**result.scores, VALIDATION_LOSS: result.loss, "perplexity": result.perplexity}
    if aligned is not None:
        rates = aligned.to_dict()
        rated = (VALIDATION_AER, "precision", "recall")
        values |= {f"alignment_{rate}": rates[rate] for rate in rated}
    board.add(step, "valid", values)
