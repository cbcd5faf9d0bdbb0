"""Comparisons of two systems trained with several seeds and scored on the same test
sentences: a two-level bootstrap over seeds and sentences, wins per seed, Holm's
adjustment over a family of comparisons, and the seeds a comparison needs to be decided.

Both sources of chance enter: which seeds were trained (a run's score moves with its
seed) and which sentences happen to be in the test set. A test that resamples only
sentences, with the seeds pooled as if they were more sentences, counts the second alone
and calls differences "significant" that another set of seeds would not reproduce.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05  # a comparison is significant where its Holm-adjusted p is below this
CONFIDENCE = 0.95  # of the interval of the difference


@dataclass(frozen=True)
class Resampled:
    """A system's score per seed, as observed and under each bootstrap resample of the
    test sentences (the same resamples for every system it is compared with)."""

    seeds: tuple[int, ...]
    observed: np.ndarray  # (seeds,)
    resampled: np.ndarray  # (samples, seeds)


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
        """Whether the seeds could show a difference at all: see `smallest_exact_p`."""
        return smallest_exact_p(*self.seeds) < ALPHA

    @property
    def significant(self) -> bool:
        """Decidable, and the Holm-adjusted p below ALPHA."""
        return self.decidable and self.p_holm is not None and self.p_holm < ALPHA


def smallest_exact_p(a: int, b: int) -> float:
    """The smallest two-sided p an exact permutation test of `a` against `b` seeds can
    reach, 2 / C(a + b, a): 2 vs 2 seeds 0.33, 3 vs 3 0.10, 4 vs 4 0.029. Below ALPHA
    the seeds cannot vouch for a difference, whatever a bootstrap says."""
    return min(1.0, 2 / math.comb(a + b, a))


def sentence_resamples(sentences: int, samples: int, rng: np.random.Generator) -> np.ndarray:
    """(samples, sentences) counts: how often each test sentence is drawn in each
    bootstrap resample of the test set (drawn with replacement, as many as there are)."""
    return rng.multinomial(sentences, np.full(sentences, 1 / sentences), size=samples)


def resample_system(
    seeds: Sequence[int],
    statistics: Sequence[np.ndarray],
    score: Callable[[np.ndarray], np.ndarray],
    counts: np.ndarray,
) -> Resampled:
    """A system's `Resampled` scores from each seed's per-sentence sufficient statistics
    (sentences, k) (e.g. n-gram matches) and `score`, the corpus metric of each row of
    summed statistics (m, k) -> (m,)."""
    observed = score(np.stack([stats.sum(axis=0) for stats in statistics]))
    sums = np.stack([counts @ stats for stats in statistics], axis=1)  # (samples, seeds, k)
    resampled = score(sums.reshape(-1, sums.shape[-1])).reshape(sums.shape[:2])
    return Resampled(tuple(seeds), np.asarray(observed, dtype=float), resampled)


def compare(
    baseline: Resampled, cell: Resampled, rng: np.random.Generator, higher_is_better: bool
) -> Comparison:
    """Two-level bootstrap of the difference of the mean scores over seeds.

    Each resample b draws each system's seeds with replacement and the test sentences
    (`Resampled.resampled`, the same sentences for both): Δ*_b = mean of the cell's drawn
    seeds' scores on those sentences minus the baseline's. A mean over n drawn seeds
    varies (n - 1)/n times as much as the mean of n new seeds would, so its deviation
    from the mean over all seeds is scaled by sqrt(n / (n - 1)).
    The interval is the percentile interval of Δ*; the two-sided p is
    (1 + #{|Δ*_b - Δ| >= |Δ|}) / (1 + samples), Δ*_b centred on the observed Δ as it
    would be under no difference; no difference at all gives p = 1.
    """
    difference = float(cell.observed.mean() - baseline.observed.mean())
    draws = _seed_means(cell, rng) - _seed_means(baseline, rng)
    tail = (1 - CONFIDENCE) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])
    extreme = np.count_nonzero(np.abs(draws - difference) >= abs(difference))
    p = 1.0 if difference == 0 else (1 + extreme) / (1 + len(draws))
    sign = 1 if higher_is_better else -1
    base = dict(zip(baseline.seeds, baseline.observed, strict=True))
    own = zip(cell.seeds, cell.observed, strict=True)
    paired = [(score, base[seed]) for seed, score in own if seed in base]
    wins = sum(sign * (score - other) > 0 for score, other in paired)
    return Comparison(
        difference=difference,
        low=float(low),
        high=float(high),
        p=float(p),
        wins=wins,
        paired=len(paired),
        seeds=(len(baseline.seeds), len(cell.seeds)),
    )


def _seed_means(system: Resampled, rng: np.random.Generator) -> np.ndarray:
    """Per resample, the mean score of the system's seeds drawn with replacement."""
    samples, n = system.resampled.shape
    drawn = rng.integers(0, n, size=(samples, n))
    means = np.take_along_axis(system.resampled, drawn, axis=1).mean(axis=1)
    if n == 1:
        return means
    centre = system.resampled.mean(axis=1)
    return centre + (means - centre) * math.sqrt(n / (n - 1))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the order given: with the m p-values sorted
    ascending, p_(i) becomes max over j <= i of min(1, (m - j + 1) p_(j)). Rejecting
    where the adjusted p is below alpha keeps the chance of any false rejection among
    the m below alpha."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
