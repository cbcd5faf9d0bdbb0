"""The sweep report on hand-made run directories: means and deviations over seeds,
paired significance against the baseline, BLEU by source length, the tables."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest
from sweep_helpers import write_sweep

from seq2seq.sweep import SweepDir, load_sweep
from seq2seq.sweep.report import results_csv, results_markdown
from seq2seq.sweep.results import collect

REFERENCES = [f"sentence number {i} with some words in it" for i in range(30)]


def hand_made_run(root: Path, run, scores: dict, hypotheses: list[str], validations) -> None:
    """A finished run directory as train.run leaves it, written by hand."""
    path = root / "runs" / run.name
    (path / "test").mkdir(parents=True)
    (path / "config.yaml").write_text(run.config.to_yaml())
    (path / "test/test.hyp").write_text("".join(h + "\n" for h in hypotheses))
    (path / "test/scores.json").write_text(json.dumps({"test": scores}))
    summary = {
        "steps": 100,
        "best_step": validations[-1][0],
        "best_bleu": scores["bleu"],
        "train_seconds": 10.0 * run.seed,
        "target_tokens_per_s": 1000.0,
        "parameters": 1234,
        "skipped_updates": 0,
        # The loss falls with BLEU, so that only the best step's gives its perplexity.
        "validations": [
            {"step": s, "bleu": b, "chrf": 0.0, "loss": 5.0 - b / 50} for s, b in validations
        ],
    }
    (path / "summary.json").write_text(json.dumps(summary))


# Hypotheses of the baseline's two seeds: its first word, then its first three words.
POOR = {1: [r.split()[0] for r in REFERENCES], 2: [" ".join(r.split()[:3]) for r in REFERENCES]}


@pytest.fixture
def hand_made(tmp_path, monkeypatch):
    """A sweep of bahdanau (poor hypotheses), dot and general (perfect ones) written by
    hand: two seeds each but general's seed 2, which is interrupted. Returns the sweep
    and what `collect` reads of it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d/test.tgt").write_text("".join(r + "\n" for r in REFERENCES))
    # 20 sources of 5 words, then 10 of 12: the first two length buckets.
    sources = ["w " * (5 if i < 20 else 12) for i in range(len(REFERENCES))]
    (tmp_path / "d/test.src").write_text("".join(s + "\n" for s in sources))
    grid = {"model.attention.type": ["bahdanau", "dot", "general"]}
    sweep = load_sweep(
        write_sweep(tmp_path, grid=grid, baseline={"model.attention.type": "bahdanau"})
    )
    directory = SweepDir(tmp_path / "sweep")
    directory.adopt(sweep)
    bahdanau, dot, general = sweep.cells
    known = {  # cell, seed -> BLEU, chrF
        (bahdanau, 1): (20.0, 30.0), (bahdanau, 2): (24.0, 33.0),
        (dot, 1): (100.0, 100.0), (dot, 2): (99.0, 98.0),
        (general, 1): (50.0, 60.0),
    }  # fmt: skip
    for (cell, seed), (bleu, chrf) in known.items():
        hypotheses = POOR[seed] if cell is bahdanau else REFERENCES
        curve = [(10, bleu / 2), (20, bleu)] if seed == 1 else [(10, bleu / 4), (20, bleu)]
        run = sweep.run(cell, seed)
        hand_made_run(directory.root, run, {"bleu": bleu, "chrf": chrf}, hypotheses, curve)
    interrupted = directory.run(sweep.run(general, 2))
    interrupted.checkpoints.mkdir(parents=True)
    interrupted.checkpoint("last").write_bytes(b"")
    return sweep, collect(directory)


def test_report_aggregates_the_seeds_of_each_cell(hand_made):
    sweep, results = hand_made
    assert [c.cell for c in results.cells] == sweep.cells
    assert [(r.name, s.value) for r, s in results.unfinished] == [
        ("attention.type=general,seed=2", "interrupted")
    ]
    base, best, single = results.cells
    assert best.scores["test"]["bleu"].mean == pytest.approx(99.5)
    assert best.scores["test"]["bleu"].std == pytest.approx(statistics.stdev([100.0, 99.0]))
    assert base.scores["test"]["chrf"].mean == pytest.approx(31.5)
    assert single.scores["test"]["bleu"].std is None  # one seed: no deviation
    assert base.statistics["train_seconds"].mean == pytest.approx(15.0)
    # Both seeds' best step is the last (BLEU 20 and 24): perplexities e^4.6 and e^4.52.
    assert base.statistics["valid_ppl"].mean == pytest.approx((math.exp(4.6) + math.exp(4.52)) / 2)
    assert base.curve == [(10, statistics.mean([10.0, 6.0])), (20, 22.0)]


def test_report_pairs_the_seeds_finished_in_both_cells(hand_made):
    _, results = hand_made
    base, best, single = results.cells
    # The p-value is sacrebleu's paired bootstrap on both seeds' hypotheses concatenated.
    test = PairedTest(
        [("base", POOR[1] + POOR[2]), ("dot", REFERENCES * 2)],
        {"BLEU": BLEU(), "chrF": CHRF()},
        [REFERENCES * 2],
        test_type="bs",
        n_samples=1000,
    )
    expected = test()[1]["BLEU"][1].p_value
    assert best.compared_seeds == [1, 2]
    assert best.significance["test"].bleu_p == pytest.approx(expected) and expected < 0.05
    assert single.compared_seeds == [1]  # general's seed 2 is not finished
    assert base.significance == {}
    assert best.by_length["test"] == [(20, 100.0), (10, 100.0), (0, None), (0, None)]
    short = BLEU().corpus_score(POOR[1][:20] + POOR[2][:20], [REFERENCES[:20] * 2]).score
    assert base.by_length["test"][0] == (20, pytest.approx(short, abs=0.005))


def test_report_tables_show_the_aggregates(hand_made):
    _, results = hand_made
    p = results.cells[1].significance["test"].bleu_p
    table = results_markdown(results)
    assert "| bahdanau (baseline) | 2 | 22.00 ± 2.83 | baseline |" in table
    assert f"| dot | 2 | 99.50 ± 0.71 | {p:.3f} * |" in table
    assert "| general | 1 | 50.00 ± - |" in table
    assert "| best step | valid ppl | train s |" in table
    assert f"| 20 | {math.exp(4.0):.2f} | 10 |" in table  # general: BLEU 50 at step 20
    assert "`attention.type=general,seed=2`: interrupted" in table
    assert "| cell | 1-9 (20) | 10-14 (10) | 15-19 (0) | 20+ (0) |" in table
    assert "| dot | 100.00 | 100.00 | - | - |" in table
    rows = results_csv(results).splitlines()
    assert rows[0].startswith("model.attention.type,baseline,seeds,test_bleu_mean,test_bleu_std")
    assert rows[1].startswith("bahdanau,True,1 2,22.0,2.8284,,31.5,")
