"""What a sweep's finished runs say, cell by cell: each metric of each test set per seed,
the comparison with the baseline (seed-aware, see seq2seq.significance), BLEU by source
length, training statistics and validation curves.

Every metric of `metrics.METRICS` is computed again from the runs' hypotheses, as
sentence statistics whose influence on the corpus score the comparison reads. Holm's
adjustment runs over every comparison of the report on one metric: each cell against its
baseline on each test set.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace

from seq2seq.config import Config, CorpusSpec
from seq2seq.data.sources import read_corpus
from seq2seq.metrics import HEADLINE, METRICS, bleu_by_source_length
from seq2seq.significance import Comparison, SeedScores, compare, holm, score_system
from seq2seq.sweep.directory import (
    CURVE_METRIC,
    FinishedRun,
    NotFinished,
    RunState,
    Summary,
    SweepDir,
)
from seq2seq.sweep.spec import Cell, Run, Sweep
from seq2seq.train.loss import perplexity

# Per-run figures averaged over seeds, in table order (see run_statistics).
STATISTICS = ("best_step", "valid_ppl", "train_seconds", "target_tokens_per_s", "parameters")
LENGTH_EDGES = (10, 15, 20)  # source-length buckets in words: 1-9, 10-14, 15-19, 20+


@dataclass(frozen=True)
class Spread:
    """Mean and sample standard deviation (n - 1) over seeds; no deviation for one seed."""

    mean: float
    std: float | None

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(statistics.mean(values), statistics.stdev(values) if len(values) > 1 else None)


@dataclass
class CellResult:
    cell: Cell
    runs: dict[int, FinishedRun]  # finished runs by seed
    statistics: dict[str, Spread]  # STATISTICS
    curve: list[tuple[int, float]]  # (step, CURVE_METRIC's validation score: seeds' mean)
    # Test set -> metric key -> the seeds' scores and their sentences' influence.
    scores: dict[str, dict[str, SeedScores]] = field(default_factory=dict)
    # Test set -> metric key -> the comparison with the baseline; none for the baseline.
    comparisons: dict[str, dict[str, Comparison]] = field(default_factory=dict)
    # Test set -> (sentences, BLEU of the seeds' hypotheses pooled) per LENGTH_EDGES bucket.
    by_length: dict[str, list[tuple[int, float | None]]] = field(default_factory=dict)
    # Test set -> BLEU of the seeds' last checkpoints; None where a seed's is not known.
    last_bleu: dict[str, Spread | None] = field(default_factory=dict)

    @property
    def seeds(self) -> list[int]:
        return list(self.runs)

    def spread(self, name: str, metric: str) -> Spread | None:
        scored = self.scores.get(name, {}).get(metric)
        return None if scored is None else Spread.of([float(x) for x in scored.observed])


@dataclass
class SweepResults:
    sweep: Sweep
    cells: list[CellResult]  # cells with a finished run, in grid order
    unfinished: list[tuple[Run, RunState]]
    damaged: list[tuple[Run, str]]  # runs whose files cannot be read, and why
    test_sets: list[str]

    def baseline_of(self, result: CellResult) -> CellResult | None:
        """The result of `result`'s baseline cell, if it has a finished run."""
        cell = self.sweep.baseline.of(result.cell)
        return next((c for c in self.cells if c.cell == cell), None)

    @property
    def checkpoint_rules(self) -> list[str]:
        """How the runs picked the checkpoint that translated the test sets."""
        configs = [self.sweep.run(c.cell, s).config for c in self.cells for s in c.runs]
        return list(dict.fromkeys(checkpoint_rule(cfg) for cfg in configs))


def checkpoint_rule(cfg: Config) -> str:
    """`train.test_checkpoint` in words."""
    train = cfg.train
    by = f"by validation {train.metric}"
    return {
        "best": f"`best` (the best {by})",
        "last": "`last` (the last, after the whole budget)",
        "average": f"`average` (the mean of the {train.keep_best} best step-N checkpoints {by})",
    }[train.test_checkpoint]


def collect(directory: SweepDir) -> SweepResults:
    """Read every finished run of the sweep in `directory`, score each test set and
    compare each cell with the baseline; runs not finished or damaged are listed."""
    sweep = directory.load()
    finished: dict[str, dict[int, FinishedRun]] = defaultdict(dict)
    unfinished, damaged = [], []
    for run in sweep.runs:
        try:
            finished[run.cell.key][run.seed] = directory.finished(run)
        except NotFinished as not_finished:
            if not_finished.state is RunState.DAMAGED:
                damaged.append((run, str(not_finished)))
            else:
                unfinished.append((run, not_finished.state))
    cells = [_cell_result(cell, finished[cell.key]) for cell in sweep.cells if finished[cell.key]]
    names = [
        data.test_name(corpus)
        for c in cells
        for s in c.runs
        for data in [sweep.run(c.cell, s).config.data]
        for corpus in data.test
    ]
    results = SweepResults(sweep, cells, unfinished, damaged, list(dict.fromkeys(names)))
    for name in results.test_sets:
        _score_test_set(results, name)
    _adjust(results)
    return results


def _cell_result(cell: Cell, runs: dict[int, FinishedRun]) -> CellResult:
    summaries = [run.summary for run in runs.values()]
    figures = [run_statistics(summary) for summary in summaries]
    by_step: dict[int, list[float]] = defaultdict(list)
    for summary in summaries:
        for point in summary.validations:
            by_step[point.step].append(point.scores[CURVE_METRIC])
    return CellResult(
        cell=cell,
        runs=runs,
        statistics={k: Spread.of([f[k] for f in figures]) for k in STATISTICS},
        curve=[(step, statistics.mean(values)) for step, values in sorted(by_step.items())],
    )


def run_statistics(summary: Summary) -> dict[str, float]:
    """A run's STATISTICS from its summary.json: its fields, and the validation perplexity
    at the best step (the checkpoint that translated the test sets)."""
    loss = {point.step: point.loss for point in summary.validations}
    fields = {k: getattr(summary, k) for k in STATISTICS if k != "valid_ppl"}
    return fields | {"valid_ppl": perplexity(loss[summary.best_step])}


def _score_test_set(results: SweepResults, name: str) -> None:
    """Every metric of test set `name` for each cell that has it, and each cell's
    comparison with the baseline where both translated the same sentences."""
    sentences = {}  # cell -> the test set's (corpus, languages)
    for result in results.cells:
        cfg = _config(results.sweep, result)
        corpus = _test_corpus(cfg, name)
        if corpus is None:
            continue
        sentences[result.cell] = (corpus, cfg.data.pair(corpus))
        test = read_corpus(corpus, *cfg.data.pair(corpus))
        references = test.tgt
        hypotheses = {seed: run.hypotheses[name] for seed, run in result.runs.items()}
        result.scores[name] = {
            metric.key: score_system(
                list(hypotheses),
                [metric.sentence_statistics(h, references) for h in hypotheses.values()],
                metric.score_sums,
            )
            for metric in METRICS
        }
        result.last_bleu[name] = _last_bleu(results.sweep, result, name)
        result.by_length[name] = bleu_by_source_length(
            test.src, list(hypotheses.values()), references, LENGTH_EDGES
        )
    for result in results.cells:
        baseline = results.baseline_of(result)
        if baseline is None or result is baseline or baseline.cell not in sentences:
            continue
        if sentences.get(result.cell) != sentences[baseline.cell]:
            continue  # not the same sentences (the grid varies data.*)
        own, base = result.scores[name], baseline.scores[name]
        result.comparisons[name] = {
            m.key: compare(base[m.key], own[m.key], m.higher_is_better) for m in METRICS
        }


def _last_bleu(sweep: Sweep, result: CellResult, name: str) -> Spread | None:
    """BLEU of the seeds' last checkpoints on test set `name`: test/last/scores.json, or the
    test scores themselves where the checkpoint that translated them was the last."""
    found = []
    chosen = result.scores[name][HEADLINE.key]
    for seed, observed in zip(chosen.seeds, chosen.observed, strict=True):
        run, train = result.runs[seed], sweep.run(result.cell, seed).config.train
        is_last = train.test_checkpoint == "last" or (
            train.test_checkpoint == "best" and run.summary.best_step == run.summary.steps
        )
        if name in run.last_scores:
            found.append(float(run.last_scores[name][HEADLINE.key]))
        elif is_last:
            found.append(float(observed))
        else:
            return None
    return Spread.of(found)


def _adjust(results: SweepResults) -> None:
    """Holm's adjustment of each metric's p-values over every comparison of the report."""
    for metric in METRICS:
        family = [
            (result, name)
            for result in results.cells
            for name, compared in result.comparisons.items()
            if metric.key in compared
        ]
        adjusted = holm([result.comparisons[name][metric.key].p for result, name in family])
        for (result, name), p in zip(family, adjusted, strict=True):
            compared = result.comparisons[name]
            compared[metric.key] = replace(compared[metric.key], p_holm=p)


def _config(sweep: Sweep, result: CellResult) -> Config:
    return sweep.run(result.cell, result.seeds[0]).config


def _test_corpus(cfg: Config, name: str) -> CorpusSpec | None:
    """The `data.test` corpus whose hypotheses are test/NAME.hyp (see train.testing)."""
    return next((corpus for corpus in cfg.data.test if cfg.data.test_name(corpus) == name), None)
