"""A continued sweep's report: each cell's score at the first sweep's budget beside its
own, the gain, and the gap to the baseline at both budgets, on hand-made runs."""

from __future__ import annotations

import shutil

from sacrebleu.metrics import BLEU
from sweep_helpers import REFERENCES, hand_made_run, row, write_sweep

from seq2seq.sweep import SweepDir, load_sweep
from seq2seq.sweep.reporting.budgets import budget_tables
from seq2seq.sweep.reporting.report import results_markdown
from seq2seq.sweep.reporting.results import collect

GRID = {"model.attention.type": ["bahdanau", "dot"]}
FIVE_WORDS = [" ".join(r.split()[:5]) for r in REFERENCES]  # BLEU 54.9
SIX_WORDS = [" ".join(r.split()[:6]) for r in REFERENCES]  # 71.7


def bleu(hypotheses: list[str]) -> float:
    return BLEU().corpus_score(hypotheses, [REFERENCES]).score


def finish(directory: SweepDir, sweep, hypotheses: dict, steps: dict) -> None:
    """Hand-made runs of `hypotheses` by (cell index, seed), trained `steps` (by the same
    keys; default: the sweep's train.max_steps)."""
    for (cell, seed), lines in hypotheses.items():
        run = sweep.run(sweep.cells[cell], seed)
        trained = steps.get((cell, seed), run.config.train.max_steps)
        score = {"bleu": bleu(lines), "chrf": 0.0}
        hand_made_run(directory.root, run, score, lines, [(trained, 1.0)], steps=trained)


def two_sweeps(
    tmp_path, monkeypatch, first_runs: dict, continued_runs: dict, budget=14, steps=None
):
    """The first sweep (7 updates) and one continuing it to `budget`, with hypotheses by
    (cell index, seed), trained as far as their budgets or `steps` (by sweep, 0 or 1, then
    by the same keys) say; returns the continued sweep's results."""
    steps = steps or ({}, {})
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d/test.tgt").write_text("".join(r + "\n" for r in REFERENCES))
    (tmp_path / "d/test.src").write_text("".join("w w\n" for _ in REFERENCES))
    first = load_sweep(write_sweep(tmp_path, grid=GRID))
    first_dir = SweepDir(tmp_path / "first")
    first_dir.adopt(first)
    finish(first_dir, first, first_runs, steps[0])
    longer = {"train.max_steps": budget}
    path = write_sweep(tmp_path, grid=GRID, set=longer, continue_from="first")
    second = load_sweep(path)
    second_dir = SweepDir(tmp_path / "second")
    second_dir.adopt(second)
    finish(second_dir, second, continued_runs, steps[1])
    return collect(second_dir)


def test_a_gap_that_closes_with_more_updates_shows_in_both_columns(tmp_path, monkeypatch):
    first_runs = {(0, 1): SIX_WORDS, (0, 2): SIX_WORDS, (1, 1): FIVE_WORDS, (1, 2): SIX_WORDS}
    continued = {(0, 1): REFERENCES, (0, 2): REFERENCES, (1, 1): REFERENCES, (1, 2): REFERENCES}
    results = two_sweeps(tmp_path, monkeypatch, first_runs, continued)
    lines = budget_tables(results)
    assert lines[0] == "## The first budget against this one" and "### test" in lines
    assert "\n".join(lines) in results_markdown(results)
    head = row(lines, "cell")
    assert head[2:] == [
        "BLEU, 7 updates",
        "14 updates",
        "gain",
        "Δ baseline, 7 updates",
        "14 updates",
    ]
    six, five = bleu(SIX_WORDS), bleu(FIVE_WORDS)
    assert row(lines, "bahdanau") == [
        "bahdanau", "2", f"{six:.2f}", "100.00", f"{100 - six:+.2f}", "baseline", "",
    ]  # fmt: skip
    dot_first = (five + six) / 2  # seeds 1 and 2
    assert row(lines, "dot") == [
        "dot", "2", f"{dot_first:.2f}", "100.00", f"{100 - dot_first:+.2f}",
        f"{dot_first - six:+.2f}", "+0.00",
    ]  # fmt: skip


def test_each_budget_is_named_by_the_updates_its_runs_trained(tmp_path, monkeypatch):
    """Not by the configs' train.max_steps: runs continued (before that was refused) into a
    budget of 5 that they had passed, tested again at 7 updates, are not said to be at 5."""
    runs = {(0, 1): SIX_WORDS, (1, 1): SIX_WORDS}
    trained = ({}, {(0, 1): 7, (1, 1): 7})
    lines = budget_tables(two_sweeps(tmp_path, monkeypatch, runs, runs, budget=5, steps=trained))
    assert row(lines, "cell")[2:4] == ["BLEU, 7 updates", "7 updates"]
    assert "(`first`, 7 updates) and at this one (7 updates)" in "\n".join(lines)


def test_runs_that_trained_unlike_updates_make_a_range(tmp_path, monkeypatch):
    runs = {(0, 1): SIX_WORDS, (1, 1): SIX_WORDS}
    early = ({(1, 1): 5}, {})  # early stopping ended a first run at 5
    lines = budget_tables(two_sweeps(tmp_path, monkeypatch, runs, runs, steps=early))
    assert row(lines, "cell")[2:4] == ["BLEU, 5–7 updates", "14 updates"]


def test_runs_whose_first_run_is_not_finished_are_left_out_and_named(tmp_path, monkeypatch):
    first_runs = {(0, 1): SIX_WORDS, (0, 2): SIX_WORDS, (1, 1): FIVE_WORDS}
    continued = {(0, 1): REFERENCES, (0, 2): REFERENCES, (1, 1): REFERENCES, (1, 2): REFERENCES}
    lines = budget_tables(two_sweeps(tmp_path, monkeypatch, first_runs, continued))
    assert row(lines, "dot")[:2] == ["dot", "1"]
    assert row(lines, "dot")[5] == f"{bleu(FIVE_WORDS) - bleu(SIX_WORDS):+.2f}"  # seed 1 only
    assert "Left out (not finished in `first`): dot, seed 2." in lines


def test_an_unreadable_first_sweep_is_one_line_not_a_failed_report(tmp_path, monkeypatch):
    runs = {(0, 1): REFERENCES, (1, 1): REFERENCES}
    results = two_sweeps(tmp_path, monkeypatch, runs, runs)
    shutil.rmtree(tmp_path / "first")
    lines = budget_tables(results)
    assert (
        len(lines) == 4 and "continues the runs of `first`, which cannot be read here" in lines[2]
    )


def test_a_sweep_that_continues_none_has_no_such_section(tmp_path, monkeypatch):
    runs = {(0, 1): REFERENCES, (1, 1): REFERENCES}
    results = two_sweeps(tmp_path, monkeypatch, runs, runs)
    first = collect(SweepDir(tmp_path / "first"))
    assert budget_tables(first) == [] and budget_tables(results) != []
