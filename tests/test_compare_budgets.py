"""scripts/compare_budgets.py on hand-made sweep directories: the gains, and which runs
repeat their shorter twin (the study's check that a longer run continues the shorter)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def run_dir(sweep: Path, name: str, bleu: float, validations: list[tuple[int, float, float]]):
    run = sweep / "runs" / name
    (run / "test").mkdir(parents=True)
    (run / "test/scores.json").write_text(json.dumps({"test": {"bleu": bleu}}))
    points = [{"step": step, "bleu": b, "loss": loss} for step, b, loss in validations]
    (run / "summary.json").write_text(json.dumps({"validations": points}))


def test_runs_that_left_their_twin_are_named_with_both_bleus_at_the_budget(
    load_script, tmp_path, monkeypatch, capsys
):
    short, long = tmp_path / "short", tmp_path / "long"
    shared = [(1, 10.0, 3.5), (2, 20.0, 2.5)]
    run_dir(short, "attention.type=dot,seed=1", 30.0, shared)
    run_dir(long, "attention.type=dot,seed=1", 32.0, [*shared, (4, 25.0, 2.0)])
    run_dir(short, "attention.type=cosine,seed=1", 31.0, shared)
    apart = [(1, 10.0, 3.4999), (2, 21.5, 2.4), (4, 26.0, 1.9)]  # another CPU's floats
    run_dir(long, "attention.type=cosine,seed=1", 32.5, apart)
    monkeypatch.setattr(sys, "argv", ["compare_budgets.py", str(short), str(long)])
    load_script("compare_budgets").main()
    out = capsys.readouterr().out
    assert "| `dot`, seed 1 | 30.00 -> 32.00 |" in out
    assert "test: BLEU rose in 2 of 2 runs; mean gain +1.75 (+1.50 to +2.00)" in out
    assert "1 of 2 runs repeat their twin over its budget" in out
    assert (
        "  not `cosine`, seed 1: from update 1 on; validation BLEU at 2 20.00 (twin) against 21.50"
        in out
    )
    assert "not `dot`" not in out
    assert "minus their twins': mean +1.50 (+1.50 to +1.50); above in 1, below in 0" in out
    # validation BLEU 20 -> 25 (dot) and 21.5 -> 26 (cosine), each within its own run
    assert "its budget -> its end: mean gain +4.75 (+4.50 to +5.00)" in out
