"""What a sweep's finished runs say, cell by cell: test scores over seeds, significance
against the baseline, BLEU by source length, training statistics and validation curves.

Significance is sacrebleu's paired bootstrap resampling of a cell against the baseline
on the concatenation of the seeds finished in both: the cell's seed-k hypotheses are
paired with the baseline's seed-k ones, and the references repeat once per seed. One test
over all seeds pools the seeds' variation into a single p-value per test set.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from seq2seq.checkpoint import RunDir
from seq2seq.config import Config
from seq2seq.data.corpus import corpus_path, read_lines
from seq2seq.evaluate import Significance, bleu_by_source_length, paired_bootstrap
from seq2seq.sweep.directory import RunState, SweepDir
from seq2seq.sweep.spec import Cell, Run, Sweep
from seq2seq.train.loss import perplexity

SAMPLES = 1000  # bootstrap resamples, sacrebleu's default
ALPHA = 0.05  # p below this is marked significant
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
    runs: dict[int, RunDir]  # finished runs by seed
    scores: dict[str, dict[str, Spread]]  # test set -> {"bleu", "chrf"}
    statistics: dict[str, Spread]  # STATISTICS
    curve: list[tuple[int, float]]  # (step, validation BLEU averaged over the seeds)
    # Test set -> the paired test against the baseline; none for the baseline itself.
    significance: dict[str, Significance] = field(default_factory=dict)
    compared_seeds: list[int] = field(default_factory=list)
    # Test set -> (sentences, BLEU of the seeds' hypotheses pooled) per LENGTH_EDGES bucket.
    by_length: dict[str, list[tuple[int, float | None]]] = field(default_factory=dict)

    @property
    def seeds(self) -> list[int]:
        return list(self.runs)


@dataclass
class SweepResults:
    sweep: Sweep
    cells: list[CellResult]  # cells with a finished run, in grid order
    unfinished: list[tuple[Run, RunState]]
    test_sets: list[str]

    @property
    def baseline(self) -> CellResult | None:
        return next((c for c in self.cells if c.cell == self.sweep.baseline), None)


def collect(directory: SweepDir) -> SweepResults:
    """Read every finished run of the sweep in `directory` and test each cell against the
    baseline; runs not finished are listed, not read."""
    sweep = directory.load()
    finished: dict[str, dict[int, RunDir]] = defaultdict(dict)
    unfinished = []
    for run in sweep.runs:
        state = directory.state(run)
        if state is RunState.FINISHED:
            finished[run.cell.key][run.seed] = directory.run(run)
        else:
            unfinished.append((run, state))
    cells = [_cell_result(cell, finished[cell.key]) for cell in sweep.cells if finished[cell.key]]
    test_sets = list(dict.fromkeys(name for c in cells for name in c.scores))
    results = SweepResults(sweep, cells, unfinished, test_sets)
    for result in cells:
        _score_by_length(sweep, result)
    baseline = results.baseline
    if baseline is not None:
        for result in cells:
            if result is not baseline:
                _compare(sweep, baseline, result)
    return results


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _cell_result(cell: Cell, runs: dict[int, RunDir]) -> CellResult:
    scores = [_read_json(run.test / "scores.json") for run in runs.values()]
    summaries = [_read_json(run.summary) for run in runs.values()]
    spreads: dict[str, dict[str, Spread]] = {}
    for name in dict.fromkeys(name for score in scores for name in score):
        found = [score[name] for score in scores if name in score]
        spreads[name] = {m: Spread.of([s[m] for s in found]) for m in ("bleu", "chrf")}
    figures = [run_statistics(summary) for summary in summaries]
    by_step: dict[int, list[float]] = defaultdict(list)
    for summary in summaries:
        for point in summary["validations"]:
            by_step[point["step"]].append(point["bleu"])
    return CellResult(
        cell=cell,
        runs=runs,
        scores=spreads,
        statistics={k: Spread.of([f[k] for f in figures]) for k in STATISTICS},
        curve=[(step, statistics.mean(values)) for step, values in sorted(by_step.items())],
    )


def run_statistics(summary: dict) -> dict[str, float]:
    """A run's STATISTICS from its summary.json: its fields, and the validation perplexity
    at the best step (the checkpoint that translated the test sets)."""
    loss = {point["step"]: point["loss"] for point in summary["validations"]}
    fields = {k: summary[k] for k in STATISTICS if k != "valid_ppl"}
    return fields | {"valid_ppl": perplexity(loss[summary["best_step"]])}


def _compare(sweep: Sweep, baseline: CellResult, result: CellResult) -> None:
    """The paired test of `result` against the baseline on each test set both scored, over
    the seeds finished in both."""
    seeds = [s for s in sweep.definition.seeds if s in baseline.runs and s in result.runs]
    result.compared_seeds = seeds
    if not seeds:
        return
    cfg = sweep.run(result.cell, seeds[0]).config
    base_cfg = sweep.run(baseline.cell, seeds[0]).config
    for name in result.scores:
        prefix = _test_prefix(cfg, name)
        if prefix is None or (prefix, cfg.data.tgt) != (
            _test_prefix(base_cfg, name),
            base_cfg.data.tgt,
        ):
            continue  # not the same sentences in both cells (the grid varies data.*)
        references = read_lines(corpus_path(prefix, cfg.data.tgt))
        result.significance[name] = paired_bootstrap(
            _hypotheses(baseline, seeds, name),
            _hypotheses(result, seeds, name),
            references * len(seeds),
            SAMPLES,
        )


def _score_by_length(sweep: Sweep, result: CellResult) -> None:
    cfg = sweep.run(result.cell, result.seeds[0]).config
    for name in result.scores:
        prefix = _test_prefix(cfg, name)
        if prefix is None:
            continue
        result.by_length[name] = bleu_by_source_length(
            read_lines(corpus_path(prefix, cfg.data.src)),
            [read_lines(run.test_hypotheses(name)) for run in result.runs.values()],
            read_lines(corpus_path(prefix, cfg.data.tgt)),
            LENGTH_EDGES,
        )


def _test_prefix(cfg: Config, name: str) -> str | None:
    """The `data.test` prefix whose hypotheses are test/NAME.hyp (see train.run)."""
    return next((prefix for prefix in cfg.data.test if Path(prefix).name == name), None)


def _hypotheses(result: CellResult, seeds: list[int], name: str) -> list[str]:
    """The test set NAME's translations of the given seeds, one after the other."""
    runs = [result.runs[seed] for seed in seeds]
    return [line for run in runs for line in read_lines(run.test_hypotheses(name))]
