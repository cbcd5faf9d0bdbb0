"""Minimum Bayes risk selection (`decode.mbr`): of a line's N candidates (a beam's N best,
or N samples), the one whose mean utility against all N, taken as references, is highest
(Eikema and Aziz, 2020; Freitag et al., 2022):

    h* = argmax over candidates h of (1/N) * sum_j u(h, y_j),

u being sacrebleu's sentence-level chrF or BLEU. The N stand for the model's distribution,
so a translation found twice counts twice as a reference; as a candidate it counts once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from sacrebleu.metrics import BLEU, CHRF

from seq2seq.config.decode import Utility

# Each utility's sentence score u(hypothesis, reference), 0 to 100.
UTILITIES: dict[str, Callable[[], Callable[[str, str], float]]] = {
    "chrf": lambda: _sentence_score(CHRF()),
    "bleu": lambda: _sentence_score(BLEU(effective_order=True)),
}


def _sentence_score(metric: CHRF | BLEU) -> Callable[[str, str], float]:
    return lambda hypothesis, reference: metric.sentence_score(hypothesis, [reference]).score


def mbr_order(texts: list[str], utility: Utility) -> list[int]:
    """The index of each distinct text of `texts` (its first), best first by expected
    utility against all of `texts`; ties keep the order of `texts`."""
    score = UTILITIES[utility]()
    counts = Counter(texts)
    first = {text: texts.index(text) for text in counts}
    total = {h: sum(n * score(h, y) for y, n in counts.items()) for h in counts}  # N x mean
    return sorted(first.values(), key=lambda i: -total[texts[i]])
