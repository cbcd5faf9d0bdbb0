"""The seed-aware comparison on simulated sweeps with a known truth: its error rate under
no difference, its power against a real one, the coverage of its interval; Holm by hand;
the seeds a comparison needs."""

from __future__ import annotations

import numpy as np
import pytest

from seq2seq.evaluate import METRICS
from seq2seq.significance import (
    Comparison,
    Resampled,
    compare,
    holm,
    resample_system,
    sentence_resamples,
    smallest_exact_p,
)

SENTENCES, SAMPLES, SWEEPS = 60, 400, 200


def mean_score(sums: np.ndarray) -> np.ndarray:
    """A corpus metric that is the mean of sentence scores: statistics (score, 1)."""
    return sums[:, 0] / sums[:, 1]


def simulated_pair(rng, seeds: int, shift: float) -> tuple[Resampled, Resampled]:
    """Baseline and cell on one simulated test set. A sentence score is sentence
    difficulty (shared) + the cell's own sentence effects (mean 0: a system-by-sentence
    interaction that only resampling sentences sees) + a per-run effect of the seed
    + noise; the cell is better by `shift` on average over seeds and sentences."""
    difficulty = rng.normal(0, 1, SENTENCES)
    own = rng.normal(0, 0.3, SENTENCES)

    def system(mean: float, effects: np.ndarray) -> list[np.ndarray]:
        runs = rng.normal(0, 0.2, (seeds, 1)) + rng.normal(0, 1, (seeds, SENTENCES))
        scores = mean + difficulty + effects + runs
        return [np.stack([row, np.ones(SENTENCES)], axis=1) for row in scores]

    counts = sentence_resamples(SENTENCES, SAMPLES, rng)
    baseline = resample_system(range(seeds), system(0.0, 0 * own), mean_score, counts)
    return baseline, resample_system(range(seeds), system(shift, own), mean_score, counts)


def simulate(seeds: int, shift: float, sweeps: int = SWEEPS) -> list[tuple[Comparison, float]]:
    """Comparisons of simulated sweeps, each with the p of a test that resamples the
    sentences alone (the seeds pooled), for contrast."""
    rng = np.random.default_rng(7)
    found = []
    for _ in range(sweeps):
        baseline, cell = simulated_pair(rng, seeds, shift)
        observed = cell.observed.mean() - baseline.observed.mean()
        pooled = cell.resampled.mean(axis=1) - baseline.resampled.mean(axis=1)
        sentence_only = (1 + np.sum(np.abs(pooled - observed) >= abs(observed))) / (1 + SAMPLES)
        found.append((compare(baseline, cell, rng, higher_is_better=True), sentence_only))
    return found


def test_under_no_difference_a_5_percent_test_rejects_about_5_percent():
    found = simulate(seeds=4, shift=0.0)
    rejected = np.mean([c.p < 0.05 for c, _ in found])
    assert 0.01 <= rejected <= 0.10  # 200 sweeps: 5% +- 3% is sampling noise
    # Resampling sentences alone takes seed-to-seed variation for a real difference.
    assert np.mean([p < 0.05 for _, p in found]) > 0.2


def test_the_interval_covers_the_true_difference_at_about_its_rate():
    for shift in (0.0, 0.3):
        covered = np.mean([c.low <= shift <= c.high for c, _ in simulate(4, shift)])
        assert 0.90 <= covered <= 0.99, shift


def test_a_consistent_shift_is_detected():
    found = [c for c, _ in simulate(seeds=5, shift=0.8, sweeps=50)]
    assert np.mean([c.p < 0.05 for c in found]) > 0.9
    assert np.mean([c.wins for c in found]) > 4  # of 5 seeds
    assert all(c.difference > 0 for c in found)


def test_wins_pair_the_same_seed_and_follow_the_metrics_direction():
    def system(seeds, scores):
        observed = np.array(scores, float)
        return Resampled(tuple(seeds), observed, np.tile(observed, (10, 1)))

    baseline = system([1, 2, 3], [30.0, 31.0, 32.0])
    cell = system([1, 2, 4], [31.0, 30.0, 50.0])  # seed 4: the baseline has none
    rng = np.random.default_rng(0)
    higher = compare(baseline, cell, rng, higher_is_better=True)
    assert (higher.wins, higher.paired, higher.seeds) == (1, 2, (3, 3))
    assert higher.difference == pytest.approx(111 / 3 - 31)
    lower = compare(baseline, cell, rng, higher_is_better=False)  # TER: fewer edits win
    assert lower.wins == 1
    assert compare(baseline, baseline, rng, True).p == 1.0


def test_holm_matches_a_hand_computed_example():
    # Sorted 0.01, 0.02, 0.03, 0.2 -> 4 x 0.01, 3 x 0.02, max(0.06, 2 x 0.03), 1 x 0.2.
    adjusted = holm([0.03, 0.2, 0.01, 0.02])
    assert adjusted == pytest.approx([0.06, 0.2, 0.04, 0.06])
    assert holm([0.5, 0.6]) == [1.0, 1.0]  # capped at 1
    assert holm([]) == []


def test_too_few_seeds_cannot_decide():
    assert smallest_exact_p(2, 2) == pytest.approx(1 / 3)
    assert smallest_exact_p(3, 3) == pytest.approx(0.1)
    assert smallest_exact_p(4, 4) == pytest.approx(2 / 70)
    two = Comparison(5.0, 4.0, 6.0, 0.001, 2, 2, seeds=(2, 2))
    assert not two.decidable  # however small its bootstrap p
    assert Comparison(5.0, 4.0, 6.0, 0.001, 4, 4, seeds=(4, 4)).decidable


def test_resampled_scores_are_the_metrics_own():
    """Summed sentence statistics score as sacrebleu scores the corpus, so a resample
    is the corpus metric of the sentences drawn."""
    references = [f"the {i} cats sat on {i + 1} mats today" for i in range(20)]
    hypotheses = [" ".join(r.split()[: 3 + i % 5]) for i, r in enumerate(references)]
    twice = np.zeros((1, 20), dtype=int)
    twice[0, :10] = 2  # the first ten sentences drawn twice, the others never
    for metric in METRICS:
        stats = metric.sentence_statistics(hypotheses, references)
        system = resample_system([1], [stats], metric.score_sums, twice)
        whole = metric.make().corpus_score(hypotheses, [references]).score
        half = metric.make().corpus_score(hypotheses[:10] * 2, [references[:10] * 2]).score
        assert system.observed[0] == pytest.approx(whole), metric.key
        assert system.resampled[0, 0] == pytest.approx(half), metric.key
