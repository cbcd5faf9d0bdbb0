"""Simulated sweeps with a known truth, to measure how `significance.compare` errs: two
systems, a number of seeds each, scored by BLEU, chrF and TER on a test set drawn anew
for every sweep (scripts/bench_significance.py runs the grid; tests/test_significance.py
a few regimes of it); and `seed_dominated`, two systems whose seeds spread apart.

A run r of system g translates sentence i with a word precision
    q_gri = sigmoid(LEVEL + shift_g + t_i + u_gi + s_gr + e_gri),
t_i the sentence's difficulty (shared by every run), u_gi the system's own strengths and
weaknesses (shared by its runs; what makes the test set's draw matter for a difference),
s_gr the seed's effect on the whole run and e_gri the run's own luck on the sentence. A
reference of L_i words (4 + Poisson(8)) is translated in H_gri words (L_i give or take
one, a little short on average), with Binomial(H - n + 1, q^n) matching n-grams (BLEU),
Binomial(5 min(H, L) - n + 1, q^(n/4)) matching character n-grams (chrF) and
Binomial(L, 1 - q) + |H - L| edits (TER), whose sums give sacrebleu's corpus scores (a
binomial of more than 30 trials, the character n-grams', is drawn as its rounded normal
approximation, at a tenth of the time).

The regime sets the seeds' spread as a multiple of the sentence noise: the standard
deviation of a run's BLEU from its own luck (e and the binomial draws), measured once per
regime by a pilot. With paired seeds, seed r's effects in the two systems correlate
(SEED_CORRELATION: the same data order and initial draws); unpaired, they are independent
and the seeds are numbered apart. The true difference of a shifted system is the
difference of the expected corpus scores over seeds (Gauss-Hermite nodes) on a
population of POPULATION sentences.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from seq2seq.metrics import METRICS, Metric
from seq2seq.significance import SeedScores, score_system

LEVEL, DIFFICULTY, OWN, LUCK = 0.5, 1.0, 0.5, 1.0  # the latent scale's parts (see above)
SEED_CORRELATION = 0.5
POPULATION = 100_000
SHIFT_IN_ERRORS = 2.5  # a shifted system's latent shift, in standard errors of the difference
_PILOT_RUNS, _NODES = 400, 24


@dataclass(frozen=True)
class Regime:
    seeds: int  # per system
    seed_ratio: float  # the seeds' SD over the sentence noise of a run's BLEU
    sentences: int
    paired: bool


Draw = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (trials, probability) -> counts


def _bleu(q: np.ndarray, hyp: np.ndarray, words: np.ndarray, draw: Draw) -> np.ndarray:
    """sacrebleu's BLEU statistics: hyp length, ref length, matches 1-4, totals 1-4."""
    totals = [np.maximum(hyp - n + 1, 0) for n in range(1, 5)]
    matches = [draw(total, q**n) for n, total in enumerate(totals, 1)]
    return np.stack([hyp, np.broadcast_to(words, q.shape), *matches, *totals], axis=-1)


def _chrf(q: np.ndarray, hyp: np.ndarray, words: np.ndarray, draw: Draw) -> np.ndarray:
    """sacrebleu's chrF statistics: per character order 1-6, hyp count, ref count, matches."""
    columns = []
    for n in range(1, 7):
        ours = np.maximum(5 * hyp - n + 1, 0)
        theirs = np.broadcast_to(np.maximum(5 * words - n + 1, 0), q.shape)
        columns += [ours, theirs, draw(np.minimum(ours, theirs), q ** (n / 4))]
    return np.stack(columns, axis=-1)


def _ter(q: np.ndarray, hyp: np.ndarray, words: np.ndarray, draw: Draw) -> np.ndarray:
    """sacrebleu's TER statistics: edits (each missing or extra word one more), reference
    length."""
    lengths = np.broadcast_to(words, q.shape)
    return np.stack([draw(lengths, 1 - q) + np.abs(hyp - lengths), lengths], axis=-1)


def hypothesis_words(words: np.ndarray, shape: tuple[int, ...], rng) -> np.ndarray:
    """Each translation's length: the reference's give or take a word, a little short on
    average (corpus length ratio about 0.98: BLEU's brevity penalty at its kink)."""
    return np.maximum(1, words + np.rint(rng.normal(-0.2, 1.0, shape)).astype(int))


STATISTICS = {"bleu": _bleu, "chrf": _chrf, "ter": _ter}  # metric key -> its statistics


def bleu_scores(sums: np.ndarray) -> np.ndarray:
    """(m, 10) summed BLEU statistics (`_bleu`'s columns) -> (m,) sacrebleu's corpus BLEU with
    its defaults, in arrays: `Metric.score_sums` asks sacrebleu row by row (some 30 µs a
    row), and a simulated sweep scores hundreds of rows. sacrebleu's formula: brevity
    penalty exp(1 - ref/hyp) where hyp < ref (0 where hyp is 0), precisions p_n =
    100 c_n / t_n, a zero c_n replaced by 100 / (2^k t_n) at its k-th zero (exp smoothing),
    orders from the first with t_n = 0 on left at 0 (log 0 taken as -9999999999), and 0
    where no n-gram matches."""
    hyp, ref = np.trunc(sums[:, 0]), np.trunc(sums[:, 1])
    correct, total = sums[:, 2:6], sums[:, 6:10]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        penalty = np.where(hyp < ref, np.where(hyp > 0, np.exp(1 - ref / hyp), 0.0), 1.0)
        counted = np.cumprod(total != 0, axis=1).astype(bool)
        zeros = np.cumsum((correct == 0) & counted, axis=1)
        found = np.where(correct == 0, 100.0 / (2.0**zeros * total), 100.0 * correct / total)
        precision = np.where(counted, found, 0.0)
        logs = np.where(precision > 0, np.log(np.where(precision > 0, precision, 1.0)), -9999999999)
        scores = penalty * np.exp(logs.sum(axis=1) / 4)
    return np.where(correct.any(axis=1), scores, 0.0)


# Metric key -> its score_sums in arrays, where the simulations have one (the same numbers,
# to the last bits of rounding).
FAST_SCORES = {"bleu": bleu_scores}


def _binomial(rng: np.random.Generator) -> Draw:
    def draw(trials: np.ndarray, probability: np.ndarray) -> np.ndarray:
        if trials.max() <= 30:
            return rng.binomial(trials, probability)
        mean = trials * probability
        spread = np.sqrt(mean * (1 - probability)) * rng.standard_normal(mean.shape)
        return np.clip(np.rint(mean + spread), 0, trials)

    return draw


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


class Simulation:
    """Sweeps of one regime, from one random seed, scored by `metrics`."""

    def __init__(self, regime: Regime, seed: int, metrics: Sequence[Metric] = METRICS):
        self.regime, self.metrics = regime, metrics
        self.rng = np.random.default_rng(seed)
        noise, slope = self._pilot()
        self.seed_sd = regime.seed_ratio * noise / slope  # on the latent scale
        n, s = regime.seeds, regime.sentences
        share = SEED_CORRELATION if regime.paired else 0.0
        error = np.sqrt(2 * (1 - share) * self.seed_sd**2 / n + 2 * (noise / slope) ** 2 / n)
        self.shift = SHIFT_IN_ERRORS * float(np.sqrt(error**2 + 2 * OWN**2 / s))

    def sweep(self, shifted: bool) -> dict[str, tuple[SeedScores, SeedScores]]:
        """Metric key -> (baseline, cell) of one simulated sweep; the cell better by
        `self.shift` on the latent scale where `shifted`, else drawn as the baseline is."""
        regime, rng = self.regime, self.rng
        words = 4 + rng.poisson(8, regime.sentences)
        difficulty = rng.normal(0, DIFFICULTY, regime.sentences)
        seeds = self._seed_effects()
        systems = []
        for g, lift in enumerate((0.0, self.shift if shifted else 0.0)):
            own = rng.normal(0, OWN, regime.sentences)
            luck = rng.normal(0, LUCK, (regime.seeds, regime.sentences))
            systems.append(_sigmoid(LEVEL + lift + difficulty + own + seeds[g][:, None] + luck))
        numbers = range(regime.seeds)
        labels = (numbers, numbers if regime.paired else range(100, 100 + regime.seeds))
        draw = _binomial(rng)
        hyp = [hypothesis_words(words, q.shape, rng) for q in systems]
        scores = {m.key: FAST_SCORES.get(m.key, m.score_sums) for m in self.metrics}
        return {
            m.key: tuple(
                score_system(label, STATISTICS[m.key](q, h, words, draw), scores[m.key])
                for label, q, h in zip(labels, systems, hyp, strict=True)
            )
            for m in self.metrics
        }

    def truth(self) -> dict[str, float]:
        """Metric key -> the shifted cell's true difference from the baseline: the expected
        corpus score over seeds and a population of sentences."""
        rng = np.random.default_rng(0)
        words = 4 + rng.poisson(8, POPULATION)
        base = rng.normal(0, DIFFICULTY, POPULATION) + rng.normal(0, LUCK, POPULATION)
        own = rng.normal(0, OWN, (2, POPULATION))
        hyp = hypothesis_words(words, (POPULATION,), rng)
        nodes, weights = np.polynomial.hermite_e.hermegauss(_NODES)
        weights = weights / weights.sum()
        found = {}
        for metric in self.metrics:
            means = []
            for g, lift in enumerate((0.0, self.shift)):
                latent = LEVEL + lift + base + own[g] + self.seed_sd * nodes[:, None]
                q = _sigmoid(latent)
                lengths = np.broadcast_to(hyp, q.shape)
                expected = STATISTICS[metric.key](q, lengths, words, np.multiply)
                means.append(float(weights @ metric.score_sums(expected.sum(axis=1))))
            found[metric.key] = means[1] - means[0]
        return found

    def _seed_effects(self) -> tuple[np.ndarray, np.ndarray]:
        n, share = self.regime.seeds, SEED_CORRELATION if self.regime.paired else 0.0
        common = self.rng.normal(0, 1, n)
        return tuple(
            self.seed_sd * (np.sqrt(share) * common + np.sqrt(1 - share) * self.rng.normal(0, 1, n))
            for _ in range(2)
        )

    def _pilot(self) -> tuple[float, float]:
        """The sentence noise of a run's BLEU (its SD over runs that differ in their own
        luck only, on one test set) and BLEU's slope per unit of the latent scale."""
        rng, bleu = self.rng, METRICS[0]
        s = self.regime.sentences
        words = 4 + rng.poisson(8, s)
        shared = LEVEL + rng.normal(0, DIFFICULTY, s) + rng.normal(0, OWN, s)
        q = _sigmoid(shared + rng.normal(0, LUCK, (_PILOT_RUNS, s)))
        hyp = hypothesis_words(words, q.shape, rng)
        scores = bleu.score_sums(_bleu(q, hyp, words, rng.binomial).sum(axis=1))
        steps = np.array([[-0.05], [0.05]])
        moved = _sigmoid(shared + steps + rng.normal(0, LUCK, (1, s)))
        expected = _bleu(moved, np.broadcast_to(hyp[0], moved.shape), words, np.multiply)
        expected = bleu.score_sums(expected.sum(axis=1))
        return float(scores.std(ddof=1)), float((expected[1] - expected[0]) / 0.1)


def seed_dominated(
    rng: np.random.Generator, seeds: tuple[int, int], spreads: tuple[float, float]
) -> tuple[SeedScores, SeedScores]:
    """Two systems with no difference whose seeds, unpaired, spread apart (SDs `spreads`),
    which `Simulation` (one seed SD for both) does not draw: a run's score is its seed's
    normal effect plus the mean of its own noise on 200 sentences (SD 0.01 a sentence),
    for the degrees of freedom of `compare` where the seeds alone decide. The sigmoid
    model cannot give this: a system whose seeds spread more has another expected score."""
    systems = []
    for start, n, spread in zip((0, 100), seeds, spreads, strict=True):
        own = rng.normal(0, 0.01, (n, 200))
        observed = rng.normal(0, spread, n) + own.mean(axis=1)
        systems.append(SeedScores(tuple(range(start, start + n)), observed, own))
    return systems[0], systems[1]
