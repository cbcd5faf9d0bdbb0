"""Comparisons of two systems trained with several seeds and scored on the same test
sentences: a t-test whose variance counts both sources of chance, wins per seed, Holm's
adjustment over a family of comparisons.

Both sources of chance enter: which seeds were trained (a run's score moves with its
seed) and which sentences happen to be in the test set (a system can be better on some
sentences and worse on others). A test that counts only sentences, with the seeds pooled
as if they were more sentences, calls differences "significant" that another set of seeds
would not reproduce; a test over seeds alone misses the sentences both systems share.
`compare` adds the two without counting any part twice; its calibration, against the
candidates it was chosen over, is measured by `scripts/bench_significance.py` on the
simulations of `seq2seq.calibration` (docs/sweeps.md shows the grid).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from seq2seq.errors import UserError

ALPHA = 0.05  # a comparison is significant where its Holm-adjusted p is below this
CONFIDENCE = 0.95  # of the interval of the difference
# Seeds per system below which a comparison is not decided: the calibration grid
# (docs/sweeps.md) starts here; with two, the seeds' variance rests on one degree of freedom.
MIN_SEEDS = 3
# The degrees of freedom read each seed term at this lower quantile's confidence bound
# (`variance_of_difference`).
DOF_QUANTILE = 0.3


@dataclass(frozen=True)
class SeedScores:
    """A system's corpus score per seed on one test set, and each sentence's influence on
    it: `influence[r, i]` is sentence i's linearised contribution (see `score_system`), so
    that the variance of run r's score over resamples of the test sentences is
    var_i(influence[r, i]) / sentences."""

    seeds: tuple[int, ...]
    observed: np.ndarray  # (seeds,)
    influence: np.ndarray  # (seeds, sentences)


@dataclass(frozen=True)
class Comparison:
    """A cell against the baseline on one metric and test set."""

    difference: float  # the cell's mean over its seeds minus the baseline's
    low: float  # the CONFIDENCE interval of the difference
    high: float
    p: float  # two-sided
    wins: int  # seeds in which the cell beats the baseline's run of the same seed
    paired: int  # seeds finished in both
    seeds: tuple[int, int]  # how many seeds the baseline and the cell have
    p_holm: float | None = None  # p adjusted over the comparisons of a family (`holm`)

    @property
    def decidable(self) -> bool:
        """Whether the seeds can decide: MIN_SEEDS or more on each side."""
        return min(self.seeds) >= MIN_SEEDS

    @property
    def significant(self) -> bool:
        """Decidable, and the Holm-adjusted p below ALPHA."""
        return self.decidable and self.p_holm is not None and self.p_holm < ALPHA


def score_system(
    seeds: Sequence[int],
    statistics: Sequence[np.ndarray],
    score: Callable[[np.ndarray], np.ndarray],
) -> SeedScores:
    """A system's `SeedScores` from each seed's per-sentence sufficient statistics
    (sentences, k) (e.g. n-gram matches) and `score`, the corpus metric of each row of
    summed statistics (m, k) -> (m,).

    A corpus metric f(X) of the summed statistics X = sum_i x_i is linearised at X:
    resampling the sentences moves it by about g . (X* - X), g = grad f(X) (central
    differences of one count), whose variance over resamples is S var_i(g . x_i) for S sentences. So
    influence[r, i] = S g_r . x_ri. For a metric that is a mean of sentence scores this is
    exact; for BLEU, chrF and TER the simulations measure it."""
    stacked = np.stack([np.asarray(s, dtype=float) for s in statistics])  # (seeds, S, k)
    totals = stacked.sum(axis=1)  # (seeds, k)
    seeds_n, sentences, k = stacked.shape
    # A step of one count (sacrebleu reads lengths as integers), forward where below one.
    lower = np.where(totals >= 1, totals - 1, totals)[:, None] * np.eye(k)
    upper = (totals + 1)[:, None] * np.eye(k)
    rest = totals[:, None] * (1 - np.eye(k))  # row j moves stat j only
    rows = np.concatenate([rest + upper, rest + lower], axis=1).reshape(-1, k)
    values = score(np.concatenate([totals, rows]))
    observed, moved = values[:seeds_n], values[seeds_n:].reshape(seeds_n, 2, k)
    gradient = (moved[:, 0] - moved[:, 1]) / (upper - lower).sum(axis=1)  # (seeds, k)
    influence = sentences * np.einsum("rik,rk->ri", stacked, gradient)
    return SeedScores(tuple(seeds), np.asarray(observed, dtype=float), influence)


def compare(baseline: SeedScores, cell: SeedScores, higher_is_better: bool) -> Comparison:
    """The difference Δ of the mean scores over seeds, its interval and p, from
    t = Δ / sqrt(V) on ν degrees of freedom.

    The runs form groups: one group of paired differences (cell - baseline, seed by seed)
    where both have the same seeds, else the two systems' runs. Over the runs of a group
    g (n_g of them, sign ±1), the sample variance s²_g of their scores counts the seeds'
    variation and each run's own sentence noise. The sentences both sides share add
        V_s = max(0, var_i(D_i) - Σ_g mean_r var_i(φ_gri - φ̄_gi) / (n_g - 1)) / S,
    with φ a run's influences (`SeedScores`), φ̄_g their mean over the group's runs and
    D_i = Σ_g ±φ̄_gi: the variance of Δ over resampled sentences less the runs' own part,
    which s²_g holds already. V = Σ_g s²_g / n_g + V_s, and ν as `variance_of_difference`
    says. A group of one run has no s²: its sentence noise stays in V_s, and the
    comparison counts sentences only.
    """
    if baseline.influence.shape[1] < 2:
        raise UserError(
            "a comparison needs a test set of 2 or more sentences (its sentences' variance "
            "is part of the test); score a longer test set"
        )
    difference = float(cell.observed.mean() - baseline.observed.mean())
    error, dof = variance_of_difference(variance_terms(seed_groups(baseline, cell)))
    low, high, p = t_interval(difference, math.sqrt(error), dof)
    sign = 1 if higher_is_better else -1
    base = dict(zip(baseline.seeds, baseline.observed, strict=True))
    own_scores = zip(cell.seeds, cell.observed, strict=True)
    paired = [(score, base[seed]) for seed, score in own_scores if seed in base]
    return Comparison(
        difference=difference,
        low=low,
        high=high,
        p=p,
        wins=sum(sign * (score - other) > 0 for score, other in paired),
        paired=len(paired),
        seeds=(len(baseline.seeds), len(cell.seeds)),
    )


def seed_groups(baseline: SeedScores, cell: SeedScores) -> list[SeedScores]:
    """[cell - baseline, seed by seed] where both have the same seeds, else [cell, baseline]."""
    if sorted(baseline.seeds) != sorted(cell.seeds):
        return [cell, baseline]
    order = [baseline.seeds.index(seed) for seed in cell.seeds]
    return [
        SeedScores(
            cell.seeds,
            cell.observed - baseline.observed[order],
            cell.influence - baseline.influence[order],
        )
    ]


@dataclass(frozen=True)
class VarianceTerms:
    """The parts of the variance of Δ (`compare`)."""

    # Per group of 2+ runs: s²_g / n_g on n_g - 1 df (two groups: Welch's t, never
    # Student's pooled one, which assumes both spread alike: 3 vs 3 seeds spreading 1 and
    # 10 apart rejected 10.0% of true nulls pooled, 5.7% apart; docs/sweeps.md).
    seeds: list[tuple[float, int]]
    sentences: float  # var_i(D_i) / S: Δ's variance over resampled test sentences
    own: float  # the part of `sentences` that is the runs' own noise, which `seeds` holds
    count: int  # S, the test sentences

    @property
    def shared(self) -> float:
        """V_s of `compare`: the sentences' part that no seed term holds."""
        return max(0.0, self.sentences - self.own)


def variance_terms(groups: list[SeedScores]) -> VarianceTerms:
    """The terms of `compare`'s V (its docstring): the first group counts +, a second -."""
    seeds = [(g.observed.var(ddof=1) / n, n - 1) for g in groups if (n := len(g.seeds)) > 1]
    count = groups[0].influence.shape[1]
    shared = groups[0].influence.mean(axis=0)
    if len(groups) == 2:
        shared = shared - groups[1].influence.mean(axis=0)
    return VarianceTerms(
        seeds=seeds,
        sentences=float(np.var(shared, ddof=1)) / count,
        own=sum(_own_sentence_variance(g.influence) for g in groups) / count,
        count=count,
    )


def satterthwaite(terms: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The sum V of independent variance estimates (v_j, ν_j) and its degrees of freedom
    by Welch-Satterthwaite, V² / Σ_j v_j² / ν_j (infinite where every v_j is 0)."""
    total = sum(v for v, _ in terms)
    denominator = sum(v * v / dof for v, dof in terms)
    return total, total**2 / denominator if denominator > 0 else math.inf


def variance_of_difference(terms: VarianceTerms) -> tuple[float, float]:
    """`compare`'s V and ν. ν is Welch-Satterthwaite's with each seed term raised to its
    upper confidence bound s²_g (n_g - 1) / χ²(DOF_QUANTILE; n_g - 1): plain
    Welch-Satterthwaite reads a seed spread that is small by chance as many degrees of
    freedom, and at 3 seeds rejects up to 7.7% of true nulls in the calibration grid
    (docs/sweeps.md)."""
    from scipy.special import chdtri  # here: scipy takes a second to import, in every command

    sentences = (terms.shared, terms.count - 1)
    # chdtri(ν, 1 - q): the q quantile of χ² on ν degrees of freedom.
    raised = [(v * dof / float(chdtri(dof, 1 - DOF_QUANTILE)), dof) for v, dof in terms.seeds]
    return satterthwaite([*terms.seeds, sentences])[0], satterthwaite([*raised, sentences])[1]


def _own_sentence_variance(influence: np.ndarray) -> float:
    """mean_r var_i(φ_ri - φ̄_i) / (n - 1): the part of var_i(φ̄_i) that is the runs' own
    sentence noise (φ_ri = c_i + e_ri, e independent across runs, gives
    var_i(φ̄) = var(c) + var(e) / n and mean_r var_i(φ_ri - φ̄_i) = var(e) (n - 1) / n).
    Zero for one run, whose own noise cannot be told from the shared part."""
    runs = influence.shape[0]
    if runs < 2:
        return 0.0
    deviations = influence - influence.mean(axis=0)
    return float(np.var(deviations, axis=1, ddof=1).mean()) / (runs - 1)


def t_interval(difference: float, error: float, dof: float) -> tuple[float, float, float]:
    """The CONFIDENCE interval and two-sided p of `difference` with standard error `error`
    on `dof` degrees of freedom; no variance at all gives p = 1 with no difference, else 0."""
    from scipy.special import stdtr, stdtrit  # Student's t CDF and its inverse

    if error == 0:
        return difference, difference, 1.0 if difference == 0 else 0.0
    quantile = float(stdtrit(dof, 1 - (1 - CONFIDENCE) / 2))
    p = float(2 * stdtr(dof, -abs(difference) / error))
    return difference - quantile * error, difference + quantile * error, p


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the order given: with the m p-values sorted
    ascending, p_(i) becomes max over j <= i of min(1, (m - j + 1) p_(j)). Rejecting
    where the adjusted p is below alpha keeps the chance of any false rejection among
    the m below alpha."""
    # An undefined p (NaN) last, adjusted to 1: it must not sort before, and so clear, others.
    order = sorted(range(len(p_values)), key=lambda i: (math.isnan(p_values[i]), p_values[i]))
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
