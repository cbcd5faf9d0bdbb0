"""Scoring with sacrebleu, through the table of metrics."""

import copy
import pickle

import pytest
from sacrebleu.metrics import BLEU

from seq2seq.errors import UserError
from seq2seq.metrics import (
    METRICS,
    bleu_by_source_length,
    compare_to_first,
    length_buckets,
    score_corpus,
)

REFERENCES = [f"the {i} cats sat on {i + 1} mats today" for i in range(40)]
POOR = [" ".join(r.split()[:2]) for r in REFERENCES]


def test_score_corpus_has_signatures():
    scores = score_corpus(REFERENCES, REFERENCES)
    assert (scores.bleu, scores.chrf, scores.ter) == (100.0, 100.0, 0.0)
    assert all("nrefs:1" in s for s in (scores.signature, scores.chrf_signature))
    assert "nrefs:1" in scores.ter_signature and "case:lc" in scores.ter_signature


def test_ter_counts_edits_per_reference_word():
    # Two of eight words dropped from every line: 2 deletions per 8 reference words.
    cut = [" ".join(r.split()[:6]) for r in REFERENCES]
    assert score_corpus(cut, REFERENCES).ter == 25.0
    assert score_corpus(POOR, REFERENCES).ter == 75.0


def test_scores_follow_the_metrics_table():
    scores = score_corpus(POOR, REFERENCES)
    assert list(scores.values) == [m.key for m in METRICS]
    assert scores.bleu == scores.values["bleu"]
    # scores.json keeps its keys: BLEU's signature is "signature", the others' KEY_signature.
    assert list(scores.to_dict()) == [
        "bleu", "chrf", "ter", "signature", "chrf_signature", "ter_signature"
    ]  # fmt: skip
    assert str(scores).startswith(f"BLEU {scores.bleu:.2f}  chrF {scores.chrf:.2f}  TER")
    assert pickle.loads(pickle.dumps(scores)) == copy.deepcopy(scores) == scores


def test_scores_need_aligned_lines():
    with pytest.raises(UserError, match="39 hypotheses but 40 references"):
        score_corpus(POOR[:-1], REFERENCES)


def test_bleu_by_source_length_buckets_and_pools():
    assert length_buckets((10, 15)) == ["1-9", "10-14", "15+"]
    sources = ["w " * n for n in (9, 10, 14, 15, 30)]  # bucket edges fall at 10 and 15
    references = [f"the reference sentence number {i} is here" for i in range(5)]
    wrong = [f"a completely different line {i} of output" for i in range(5)]
    scored = bleu_by_source_length(sources, [references, wrong], references, (10, 15, 40))
    assert [count for count, _ in scored] == [1, 2, 2, 0]
    assert scored[-1][1] is None  # an empty bucket has no BLEU
    pooled = BLEU().corpus_score(references[1:3] + wrong[1:3], [references[1:3] * 2]).score
    assert scored[1][1] == pytest.approx(pooled, abs=0.005) and 0 < pooled < 100
    assert bleu_by_source_length(sources, [references], references, (10,))[0][1] == 100.0


def test_translations_are_compared_with_the_first():
    """A copy of the first: no difference, p 1. Half the lines made right: better on every
    metric (TER falls), the observed difference inside its interval, p below 0.05 after
    Holm's adjustment, which never lowers a p."""
    base = [POOR[i] if i % 4 else ref for i, ref in enumerate(REFERENCES)]
    better = [ref if i % 2 else base[i] for i, ref in enumerate(REFERENCES)]
    same, improved = compare_to_first([base, list(base), better], REFERENCES)
    assert all(c.difference == 0 and c.p_holm == 1 for c in same.values())
    for metric in METRICS:
        found = improved[metric.key]
        observed = score_corpus(better, REFERENCES).values[metric.key]
        observed -= score_corpus(base, REFERENCES).values[metric.key]
        assert found.difference == pytest.approx(observed, abs=0.011)  # scores are rounded
        assert (found.difference > 0) == metric.higher_is_better
        assert found.low <= found.difference <= found.high
        assert found.p <= found.p_holm < 0.05
    with pytest.raises(UserError, match="39 hypotheses but 40 references"):
        compare_to_first([base, better[:-1]], REFERENCES)


def test_a_second_reference_counts_as_sacrebleu_counts_it():
    """A hypothesis that matches either reference of each line scores as a match: the
    first reference alone gives less; the signature says nrefs:2; the comparison's
    differences are those of the two-reference scores."""
    other = [f"{i} cats were sitting on mats" for i in range(len(REFERENCES))]
    mixed = [
        ref if i % 2 else alt for i, (ref, alt) in enumerate(zip(REFERENCES, other, strict=True))
    ]
    two = score_corpus(mixed, REFERENCES, other)
    assert two.bleu == 100.0 and score_corpus(mixed, REFERENCES).bleu < 80
    assert "nrefs:2" in two.signature and "nrefs:2" in two.ter_signature
    expected = BLEU().corpus_score(POOR, [REFERENCES, other]).score
    assert score_corpus(POOR, REFERENCES, other).bleu == round(expected, 2)
    (found,) = compare_to_first([POOR, mixed], REFERENCES, other)
    assert found["bleu"].difference == pytest.approx(100 - expected, abs=0.011)
    with pytest.raises(UserError, match="40 hypotheses but 39 references"):
        score_corpus(mixed, REFERENCES, other[:-1])
