"""Validation: teacher-forced loss and perplexity, greedy BLEU and chrF on detokenized text."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from seq2seq.config import Config
from seq2seq.data.batching import make_batch, token_batches
from seq2seq.decode.translate import AttentionMap, Translator
from seq2seq.evaluate import score_corpus
from seq2seq.models import Seq2Seq
from seq2seq.train.datasets import Datasets
from seq2seq.train.loss import perplexity, token_cross_entropy

HIGHER_IS_BETTER = {"bleu": True, "chrf": True, "loss": False}
HEATMAP_SENTENCES = 3  # the first non-empty validation sources, the same at every validation
SHOWN_TRANSLATIONS = 5  # the first validation translations TensorBoard shows as text


@dataclass
class ValidationResult:
    loss: float  # negative log-likelihood per target token, without label smoothing
    bleu: float
    chrf: float
    hypotheses: list[str]
    attention_maps: list[AttentionMap]

    @property
    def perplexity(self) -> float:
        return perplexity(self.loss)

    def metric(self, name: str) -> float:
        return getattr(self, name)


class Validator:
    def __init__(self, cfg: Config, data: Datasets, device: torch.device) -> None:
        self.cfg = cfg
        self.data = data
        self.device = device
        self.heatmap_sources = [s for s in data.valid_src if s.strip()][:HEATMAP_SENTENCES]
        self.src_ids = data.tokenizer.encode_src(data.valid_src)
        self.tgt_ids = data.tokenizer.encode_tgt(data.valid_ref)
        self.batches = token_batches(
            [len(s) for s in self.src_ids], [len(t) for t in self.tgt_ids], cfg.train.batch_tokens
        )

    @torch.no_grad()
    def teacher_forced_loss(self, model: Seq2Seq) -> float:
        total, tokens = 0.0, 0
        for group in self.batches:
            batch = make_batch(
                [self.src_ids[i] for i in group], [self.tgt_ids[i] for i in group], group
            ).to(self.device)
            logits = model(batch.src, batch.src_mask, batch.tgt_in)
            total += token_cross_entropy(logits, batch.tgt_out).item()
            tokens += batch.n_tgt_tokens
        loss = total / max(tokens, 1)
        return loss if math.isfinite(loss) else math.inf  # NaN would not rank against others

    def __call__(self, model: Seq2Seq) -> ValidationResult:
        was_training = model.training
        model.eval()
        loss = self.teacher_forced_loss(model)
        # Greedy: validation runs often, and it ranks checkpoints rather than scoring them.
        greedy = self.cfg.decode.model_copy(update={"beam": 1})
        translator = Translator(model, self.data.tokenizer, greedy, self.device)
        hypotheses = translator.translate(self.data.valid_src)
        scores = score_corpus(hypotheses, self.data.valid_ref)
        found = [translator.attention_map(line) for line in self.heatmap_sources]
        maps = [amap for amap in found if amap is not None]
        model.train(was_training)
        return ValidationResult(loss, scores.bleu, scores.chrf, hypotheses, maps)
