"""The metrics (BLEU, chrF, TER: one table, METRICS), corpus scores with their sacrebleu
signatures, per-sentence statistics for the comparisons, BLEU by source length."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import sacrebleu.metrics.base
from sacrebleu.metrics import BLEU, CHRF, TER

from seq2seq.errors import UserError
from seq2seq.significance import Comparison, compare, holm, score_system


@dataclass(frozen=True)
class Metric:
    """A corpus metric of sacrebleu's, as every score, table and test of the project
    reads it; METRICS lists them."""

    key: str  # in scores.json, summaries and reports
    title: str
    make: Callable[[], sacrebleu.metrics.base.Metric]
    higher_is_better: bool
    signature_key: str  # its signature's key in scores.json

    def sentence_statistics(
        self, hypotheses: list[str], references: list[str], *more: list[str]
    ) -> np.ndarray:
        """(sentences, k): each sentence's sufficient statistics (n-gram matches, edits...)
        against its reference (and its reference in each of `more`), whose sum over any
        sample of sentences gives that sample's corpus score."""
        streams = _aligned_streams(hypotheses, references, more)
        return np.array(self.make()._extract_corpus_statistics(hypotheses, streams), float)

    def score_sums(self, sums: np.ndarray) -> np.ndarray:
        """(m, k) summed statistics -> (m,) corpus scores, by sacrebleu's own formula."""
        metric = self.make()
        return np.array([metric._compute_score_from_stats(list(row)).score for row in sums])


METRICS = (
    Metric("bleu", "BLEU", BLEU, True, "signature"),
    Metric("chrf", "chrF", CHRF, True, "chrf_signature"),
    # Edits per reference word, in percent: lower is better.
    Metric("ter", "TER", TER, False, "ter_signature"),
)
# The metric that charts, learning curves and one-number summaries show: the table's first.
HEADLINE = METRICS[0]


@dataclass(frozen=True)
class Scores:
    """A corpus's score and sacrebleu signature for each of METRICS, also read as
    attributes named as in scores.json: `scores.bleu`, `scores.signature`."""

    values: dict[str, float]  # metric key -> score
    signatures: dict[str, str]  # metric key -> signature

    def __getattr__(self, name: str) -> float | str:
        # Through __dict__: copy and pickle ask for attributes before the fields are set.
        found = self.__dict__.get("values", {}).get(name)
        signature = next((m.key for m in METRICS if m.signature_key == name), None)
        if found is None and signature is not None:
            found = self.__dict__.get("signatures", {}).get(signature)
        if found is None:
            raise AttributeError(name)
        return found

    def to_dict(self) -> dict[str, float | str]:
        """scores.json's entry of a test set: the values, then the signatures."""
        signatures = {m.signature_key: self.signatures[m.key] for m in METRICS}
        return {**self.values, **signatures}

    def __str__(self) -> str:
        return f"{scores_line(self.values)}  ({self.signatures[METRICS[0].key]})"


def scores_line(values: dict[str, float]) -> str:
    """A score per metric key as one line, in table order: "BLEU 35.10  chrF 60.20  TER 48.00"."""
    return "  ".join(f"{m.title} {values[m.key]:.2f}" for m in METRICS)


def _check_aligned(hypotheses: list[str], references: list[str]) -> None:
    if len(hypotheses) != len(references):
        raise UserError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; "
            "give one reference line per source line"
        )


def _aligned_streams(
    hypotheses: list[str], references: list[str], more: tuple[list[str], ...]
) -> list[list[str]]:
    """sacrebleu's reference streams: `references` and each of `more`, checked line-aligned
    with `hypotheses`."""
    streams = [references, *more]
    for stream in streams:
        _check_aligned(hypotheses, stream)
    return streams


def score_corpus(hypotheses: list[str], references: list[str], *more: list[str]) -> Scores:
    """Score detokenized hypotheses against one detokenized reference each, or several
    (`more`: a second reference of each, a third...)."""
    streams = _aligned_streams(hypotheses, references, more)
    values, signatures = {}, {}
    for metric in METRICS:
        scorer = metric.make()
        values[metric.key] = round(scorer.corpus_score(hypotheses, streams).score, 2)
        signatures[metric.key] = str(scorer.get_signature())
    return Scores(values, signatures)


def compare_to_first(
    systems: list[list[str]], references: list[str], *more: list[str]
) -> list[dict[str, Comparison]]:
    """Each of `systems[1:]` (translations of the same sentences) against `systems[0]`, on
    every metric of METRICS: the difference, its interval and p from a paired test over
    the test sentences (`significance.compare`, each system one seed: it counts the
    chance of which sentences were tested, not of which model was trained), p adjusted by
    Holm over the systems compared, metric by metric; `more` as in `score_corpus`."""
    for hypotheses in systems:
        _aligned_streams(hypotheses, references, more)
    found: list[dict[str, Comparison]] = [{} for _ in systems[1:]]
    for metric in METRICS:
        scored = [
            score_system([0], [metric.sentence_statistics(h, references, *more)], metric.score_sums)
            for h in systems
        ]
        compared = [compare(scored[0], r, metric.higher_is_better) for r in scored[1:]]
        adjusted = holm([c.p for c in compared])
        for own, comparison, p in zip(found, compared, adjusted, strict=True):
            own[metric.key] = replace(comparison, p_holm=p)
    return found


def length_buckets(edges: tuple[int, ...]) -> list[str]:
    """Names of the buckets that `bleu_by_source_length` scores, e.g. (10, 20) ->
    ["1-9", "10-19", "20+"]."""
    starts = (1, *edges)
    return [f"{a}-{b - 1}" for a, b in zip(starts, edges, strict=False)] + [f"{starts[-1]}+"]


def bleu_by_source_length(
    sources: list[str], systems: list[list[str]], references: list[str], edges: tuple[int, ...]
) -> list[tuple[int, float | None]]:
    """(sentences, BLEU) per source-length bucket (see `length_buckets`; length in
    whitespace words): BLEU of the hypotheses of all `systems` in the bucket pooled, each
    system's line i paired with reference i (e.g. a cell's seeds); None for an empty bucket."""
    _check_aligned(sources, references)
    for hypotheses in systems:
        _check_aligned(hypotheses, references)
    buckets: list[list[int]] = [[] for _ in range(len(edges) + 1)]
    for i, source in enumerate(sources):
        buckets[bisect.bisect_right(edges, len(source.split()))].append(i)
    scores = []
    for lines in buckets:
        hypotheses = [system[i] for system in systems for i in lines]
        pooled = [references[i] for _ in systems for i in lines]
        bleu = round(BLEU().corpus_score(hypotheses, [pooled]).score, 2) if lines else None
        scores.append((len(lines), bleu))
    return scores
