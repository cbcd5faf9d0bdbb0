"""The sweep report on hand-made run directories: means and deviations over seeds, the
seed-aware comparison with the baseline, BLEU by source length, the tables, damaged runs."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU, CHRF
from sweep_helpers import REFERENCES, hand_made_run, row, write_sweep

from seq2seq import metrics
from seq2seq.metrics import Metric
from seq2seq.significance import holm
from seq2seq.sweep import SweepDir, load_sweep
from seq2seq.sweep.directory import RunState
from seq2seq.sweep.reporting.report import results_csv, results_markdown
from seq2seq.sweep.reporting.results import Spread, collect
from seq2seq.sweep.reporting.tables import ranking

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


def corpus_bleu(hypotheses: list[str]) -> float:
    return BLEU().corpus_score(hypotheses, [REFERENCES]).score


def test_report_aggregates_the_seeds_of_each_cell(hand_made):
    sweep, results = hand_made
    assert [c.cell for c in results.cells] == sweep.cells
    assert [(r.name, s.value) for r, s in results.unfinished] == [
        ("attention.type=general,seed=2", "interrupted")
    ]
    base, best, single = results.cells
    # Scored again from the hypotheses, every metric of the table.
    assert set(best.scores["test"]) == {"bleu", "chrf", "ter"}
    assert best.spread("test", "bleu") == Spread(pytest.approx(100.0), 0.0)
    poor = [corpus_bleu(POOR[1]), corpus_bleu(POOR[2])]
    assert base.spread("test", "bleu").mean == pytest.approx(statistics.mean(poor))
    assert base.spread("test", "bleu").std == pytest.approx(statistics.stdev(poor))
    assert single.spread("test", "bleu").std is None  # one seed: no deviation
    assert base.statistics["train_seconds"].mean == pytest.approx(15.0)
    # Both seeds' best step is the last (BLEU 20 and 24): perplexities e^4.6 and e^4.52.
    assert base.statistics["valid_ppl"].mean == pytest.approx((math.exp(4.6) + math.exp(4.52)) / 2)
    assert base.curve == [(10, statistics.mean([10.0, 6.0])), (20, 22.0)]


def test_report_compares_each_cell_with_the_baseline_seed_by_seed(hand_made):
    _, results = hand_made
    base, best, single = results.cells
    assert base.comparisons == {}
    bleu = best.comparisons["test"]["bleu"]
    assert bleu.difference == pytest.approx(100.0 - base.spread("test", "bleu").mean)
    assert (bleu.wins, bleu.paired, bleu.seeds) == (2, 2, (2, 2))
    assert bleu.low <= bleu.difference <= bleu.high
    assert not bleu.decidable and not bleu.significant  # 2 vs 2 seeds
    ter = best.comparisons["test"]["ter"]
    assert ter.difference < 0 and ter.wins == 2  # fewer edits: better
    one = single.comparisons["test"]["bleu"]
    assert (one.paired, one.seeds) == (1, (2, 1))  # general's seed 2 is not finished
    # Holm over the report's two comparisons per metric.
    ps = [c.comparisons["test"]["bleu"].p for c in (best, single)]
    assert [c.comparisons["test"]["bleu"].p_holm for c in (best, single)] == holm(ps)
    assert best.by_length["test"] == [(20, 100.0), (10, 100.0), (0, None), (0, None)]
    short = BLEU().corpus_score(POOR[1][:20] + POOR[2][:20], [REFERENCES[:20] * 2]).score
    assert base.by_length["test"][0] == (20, pytest.approx(short, abs=0.005))


def test_report_tables_show_the_aggregates(hand_made):
    _, results = hand_made
    bleu = results.cells[1].comparisons["test"]["bleu"]
    mean = results.cells[0].spread("test", "bleu")
    table = results_markdown(results)
    assert "## test\n" in table and "Checkpoint rule " in table
    assert f"| bahdanau (baseline) | 2 | {mean.mean:.2f} ± {mean.std:.2f} | baseline |" in table
    interval = f"{bleu.difference:+.2f} [{bleu.low:+.2f}, {bleu.high:+.2f}]"
    assert (
        f"| dot | 2 | 100.00 ± 0.00 | {interval} | {bleu.p:.3f} ({bleu.p_holm:.3f}) † | 2/2 |"
        in table
    )
    assert "| BLEU | Δ BLEU [95% CI] | p (Holm) | wins | chrF |" in table
    assert "with fewer than 3 seeds on a side, too few to decide" in table
    assert "| general | 1 | " in table
    assert "| best step | valid ppl | train s |" in table
    assert f"| 20 | {math.exp(4.0):.2f} | 10 |" in table  # general: BLEU 50 at step 20
    assert "`attention.type=general,seed=2`: interrupted" in table
    assert "| cell | 1-9 (20) | 10-14 (10) | 15-19 (0) | 20+ (0) |" in table
    assert "| dot | 100.00 | 100.00 | - | - |" in table
    assert "One test set" in table
    rows = results_csv(results).splitlines()
    assert rows[0].startswith("model.attention.type,baseline,seeds,test_bleu_mean,test_bleu_std")
    assert "test_ter_p_holm,test_ter_wins,best_step" in rows[0]
    assert rows[1].startswith(f"bahdanau,True,1 2,{round(mean.mean, 4)},{round(mean.std, 4)},,")


DAMAGE = {  # what breaks a finished run's files -> the problem the report names
    "scores.json cut short": ("test/scores.json", '{"test": {"bleu"', "scores.json cannot be read"),
    "scores.json an empty list": ("test/scores.json", "[]", "has no scores of test set test"),
    "summary.json cut short": ("summary.json", '{"steps": 1', "summary.json cannot be read"),
    "summary.json without its fields": ("summary.json", "{}", "summary.json: "),
    "test.hyp truncated": ("test/test.hyp", "one line\n", "test.hyp has 1 lines, not one per"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_run_is_named_left_out_and_redone(hand_made, damage):
    sweep, _ = hand_made
    directory = SweepDir(Path("sweep"))
    file, text, problem = DAMAGE[damage]
    run = sweep.run(sweep.cells[1], 2)  # dot, seed 2
    (directory.run(run).root / file).write_text(text)
    assert directory.state(run) is RunState.DAMAGED  # not finished: the sweep redoes it
    results = collect(directory)
    [(damaged, found)] = results.damaged
    assert damaged == run and problem in found and str(directory.run(run).root) in found
    dot = results.cells[1]
    assert dot.seeds == [1]  # the rest is still reported
    assert dot.comparisons["test"]["bleu"].seeds == (2, 1)
    table = results_markdown(results)
    assert "4 of 6 runs finished" in table and "## Damaged" in table
    assert f"- `{run.name}`: " in table and "delete the run directories named" in table


def test_every_table_derives_from_the_metrics_table(hand_made, add_metric):
    """Adding a metric is one entry of metrics.METRICS: scores, comparisons, both tables
    and the CSV all follow it."""
    add_metric(Metric("chrfpp", "chrF++", chrf_pp, True, "chrfpp_signature"))
    assert "chrfpp" in metrics.score_corpus(REFERENCES, REFERENCES).to_dict()
    results = collect(SweepDir(Path("sweep")))
    dot = results.cells[1]
    assert dot.spread("test", "chrfpp").mean == pytest.approx(100.0)
    assert dot.comparisons["test"]["chrfpp"].wins == 2
    assert "| chrF++ | Δ chrF++ [95% CI] | p (Holm) | wins |" in results_markdown(results)
    assert "test_chrfpp_mean" in results_csv(results).splitlines()[0]


def chrf_pp() -> CHRF:
    return CHRF(word_order=2)


def test_the_last_checkpoints_scores_stand_beside_the_rules(hand_made):
    sweep, results = hand_made
    table = results_markdown(results)
    assert "Checkpoint rule (`train.test_checkpoint`)" in table
    assert "`best` (the best by validation bleu)" in table
    assert "| test BLEU, last checkpoint | best step |" in table
    assert results.cells[1].last_bleu["test"] is None  # best step 20 of 100: last unknown
    directory = SweepDir(Path("sweep"))
    for seed, bleu in ((1, 90.0), (2, 80.0)):
        last = directory.run(sweep.run(sweep.cells[1], seed)).test / "last"
        last.mkdir()
        (last / "scores.json").write_text(json.dumps({"test": {"bleu": bleu}}))
    dot = collect(directory).cells[1]
    assert dot.last_bleu["test"] == Spread(85.0, statistics.stdev([90.0, 80.0]))


def test_the_report_says_whether_the_ranking_holds_across_test_sets(hand_made):
    _, results = hand_made
    base, dot, _ = results.cells
    results.test_sets.append("other")
    for cell in results.cells:
        cell.scores["other"] = dict(cell.scores["test"])
    assert ranking(results) == "The ranking by mean BLEU is the same on all 2 test sets."
    base.scores["other"], dot.scores["other"] = dot.scores["test"], base.scores["test"]
    assert ranking(results) == (
        "The ranking by mean BLEU differs between the test sets: "
        "test: dot > general > bahdanau; other: bahdanau > general > dot."
    )


def test_a_baseline_of_some_fields_is_compared_within_the_others(tmp_path, monkeypatch):
    """Baseline local-m at each window: local-p (perfect at window 3, poor at 5) is compared
    with local-m at its own window (poor at 3, perfect at 5), not with one cell."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    for side in ("src", "tgt"):
        (tmp_path / f"d/test.{side}").write_text("".join(r + "\n" for r in REFERENCES))
    sweep = load_sweep(write_sweep(tmp_path, baseline={"model.attention.type": "local-m"}))
    directory = SweepDir(tmp_path / "sweep")
    directory.adopt(sweep)
    m3, m5, p3, p5 = sweep.cells
    for cells in ((p3, p5), (m3, m5)):  # the baselines last
        for run in (run for run in sweep.runs if run.cell in cells):
            perfect = run.cell in (m5, p3)
            hypotheses = REFERENCES if perfect else POOR[run.seed]
            bleu = 100.0 if perfect else 20.0
            hand_made_run(directory.root, run, {"bleu": bleu}, hypotheses, [(10, bleu)])
        if cells == (p3, p5):
            alone = results_markdown(collect(directory))
            assert "`attention.type=local-m` at each attention.window has no finished run" in alone
    results = collect(directory)
    means = {c.cell: c.spread("test", "bleu").mean for c in results.cells}
    for cell, baseline in ((p3, m3), (p5, m5)):
        compared = results.cells[sweep.cells.index(cell)].comparisons["test"]["bleu"]
        assert compared.difference == pytest.approx(means[cell] - means[baseline])
    assert results.cells[2].comparisons["test"]["bleu"].difference > 50
    assert results.cells[3].comparisons["test"]["bleu"].difference < -50
    assert not results.cells[0].comparisons and not results.cells[1].comparisons
    table = results_markdown(results)
    assert "; baseline `attention.type=local-m` at each attention.window." in table
    assert table.count("| local-m (baseline) | ") == 2 * 2  # scores and training tables
    assert "minus its baseline's (`attention.type=local-m` at the cell's attention.window)" in table
    assert "Holm over the 2 comparisons" in table


def test_a_file_named_report_is_kept_and_named(hand_made, tmp_path):
    from seq2seq.errors import UserError
    from seq2seq.sweep.reporting.report import write_report

    mine = tmp_path / "sweep/report"
    mine.write_text("my notes\n")
    with pytest.raises(UserError, match=r"report is a file, not a sweep report; move it away"):
        write_report(SweepDir(tmp_path / "sweep"))
    assert mine.read_text() == "my notes\n"


@pytest.mark.parametrize("left", ["a file", "an empty directory"])
def test_a_run_directory_that_is_a_file_or_empty_is_damaged_not_unstarted(
    hand_made, tmp_path, left
):
    import shutil

    sweep, _ = hand_made
    directory = SweepDir(tmp_path / "sweep")
    run = sweep.runs[-1]  # general, seed 2: interrupted
    path = directory.run(run).root
    shutil.rmtree(path)
    if left == "a file":
        path.write_text("not a run\n")
    else:
        path.mkdir()
    results = collect(directory)
    problem = f"{path} is a file, not a run directory" if left == "a file" else f"{path} is empty"
    assert [(r.name, p) for r, p in results.damaged] == [(run.name, problem)]
    assert [r.name for r, _ in results.unfinished] == []


def test_the_report_counts_the_runs_by_the_machines_they_trained_on(hand_made):
    sweep, results = hand_made
    assert "Machines, runs each" not in results_markdown(results)  # none recorded: no line
    directory = SweepDir(Path("sweep"))
    intel, amd = {"cpu": "Intel Xeon", "cpus": 2, "gpu": None}, {"cpu": "AMD EPYC", "cpus": 2}
    gpu = {"cpu": "AMD EPYC", "cpus": 16, "gpu": "NVIDIA H100"}
    bahdanau, dot, _ = sweep.cells
    listed = {(bahdanau, 1): [intel], (bahdanau, 2): [intel], (dot, 1): [amd, intel],
              (dot, 2): [gpu]}  # fmt: skip
    for (cell, seed), machines in listed.items():
        directory.run(sweep.run(cell, seed)).meta.write_text(json.dumps({"machines": machines}))
    assert (
        "Machines, runs each (meta.json): Intel Xeon: 2; AMD EPYC then Intel Xeon: 1; "
        "AMD EPYC with NVIDIA H100: 1; not recorded: 1."
    ) in results_markdown(collect(directory))


def test_a_comparison_whose_seeds_trained_on_different_machines_is_marked(hand_made):
    sweep, results = hand_made
    assert "‡" not in results_markdown(results)  # no machine recorded: no mark
    directory = SweepDir(Path("sweep"))
    intel, amd = {"cpu": "Intel Xeon", "cpus": 2}, {"cpu": "AMD EPYC", "cpus": 2}
    bahdanau, dot, general = sweep.cells
    listed = {(bahdanau, 1): intel, (dot, 1): amd, (general, 1): intel}  # dot's seed 1 moved
    for (cell, seed), machine in listed.items():
        directory.run(sweep.run(cell, seed)).meta.write_text(json.dumps({"machines": [machine]}))
    table = results_markdown(collect(directory))
    assert row(table.splitlines(), "dot")[4].endswith("‡")
    assert not row(table.splitlines(), "general")[4].endswith("‡")
    assert "‡ marks a comparison in which a seed's run and the baseline's trained" in table
