"""Scoring and significance with sacrebleu."""

import pytest
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from seq2seq.errors import UserError
from seq2seq.evaluate import (
    bleu_by_source_length,
    length_buckets,
    paired_bootstrap,
    score_corpus,
)

REFERENCES = [f"the {i} cats sat on {i + 1} mats today" for i in range(40)]
POOR = [" ".join(r.split()[:2]) for r in REFERENCES]


def test_score_corpus_has_signatures():
    scores = score_corpus(REFERENCES, REFERENCES)
    assert scores.bleu == 100.0 and scores.chrf == 100.0
    assert "nrefs:1" in scores.signature and "nrefs:1" in scores.chrf_signature


def test_paired_bootstrap_is_sacrebleus():
    result = paired_bootstrap(POOR, REFERENCES, REFERENCES)
    named = [("baseline", POOR), ("system", REFERENCES)]
    metrics = {"BLEU": BLEU(), "chrF": CHRF()}
    _, expected = PairedTest(named, metrics, [REFERENCES], test_type="bs", n_samples=1000)()
    assert result.bleu_p == expected["BLEU"][1].p_value < 0.05
    assert result.chrf_p == expected["chrF2"][1].p_value < 0.05
    assert "bs:1000" in result.signature and "seed:12345" in result.signature
    assert paired_bootstrap(POOR, REFERENCES, REFERENCES) == result  # fixed seed


def test_equal_systems_are_not_significantly_different():
    result = paired_bootstrap(REFERENCES, list(REFERENCES), REFERENCES)
    assert (result.bleu_p, result.chrf_p) == (1.0, 1.0)


def test_paired_bootstrap_needs_aligned_lines():
    with pytest.raises(UserError, match="39 hypotheses but 40 references"):
        paired_bootstrap(POOR, REFERENCES[:-1], REFERENCES)


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
