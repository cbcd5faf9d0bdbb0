"""Sweeps of chosen cells (`cells:`) and sweeps that continue another (`continue_from:`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli
from sweep_helpers import BASE, hand_made_run, write_sweep

from seq2seq.config import load_config
from seq2seq.errors import UserError
from seq2seq.sweep import SweepDir, load_sweep
from seq2seq.train.progress import Progress
from seq2seq.train.run import train

GRID = {"model.attention.type": ["local-m", "local-p"], "model.attention.window": [3, 5]}


def test_cells_keeps_the_listed_cells_in_grid_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cells = [
        {"model.attention.type": "local-p", "model.attention.window": 5},
        {"model.attention.type": "local-m", "model.attention.window": 3},
    ]
    sweep = load_sweep(write_sweep(tmp_path, grid=GRID, cells=cells))
    assert [c.key for c in sweep.cells] == [
        "attention.type=local-m,attention.window=3",
        "attention.type=local-p,attention.window=5",
    ]
    assert len(sweep.runs) == 4 and sweep.baseline.of(sweep.cells[1]) is sweep.cells[0]


@pytest.mark.parametrize(
    "cells, fragment",
    [
        ([{"model.attention.type": "local-m"}], "each of cells must give a value for each"),
        (
            [{"model.attention.type": "dot", "model.attention.window": 3}],
            "cells lists attention.type=dot,attention.window=3, not a cell of the grid",
        ),
        ([{"model.attention.type": "local-m", "model.attention.window": 3}] * 2, "a cell twice"),
        ([{"model.attention.type": "local-p", "model.attention.window": 3}], "baseline"),
    ],
)
def test_bad_cells_name_the_problem(tmp_path, monkeypatch, cells, fragment):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=fragment):
        load_sweep(write_sweep(tmp_path, grid=GRID, cells=cells))


def test_a_continuing_sweep_trains_on_from_the_finished_runs(
    toy, tmp_path, monkeypatch, capsys, undrawn_charts
):
    """A run of 4 updates, continued to 8 by a second sweep: the first keeps its scores
    and checkpoints; the second holds the same weights as 8 updates in one go."""
    monkeypatch.chdir(tmp_path)
    base = load_config(toy / "run.yaml").to_dict()
    fixed = {"train.valid_every": 2, "train.threads": 1, "decode.beam": 1}
    short = dict(grid={"model.attention.type": ["dot"]}, seeds=[1], base_config=base)
    path = write_sweep(tmp_path, **short, set={**fixed, "train.max_steps": 4})
    assert run_cli("sweep", "--config", path, "--sweep-dir", "first") == 0
    first = tmp_path / "first/runs/attention.type=dot,seed=1"
    scores = (first / "test/scores.json").read_bytes()

    longer = {**fixed, "train.max_steps": 8}
    path = write_sweep(tmp_path, **short, name="s2", set=longer, continue_from="first")
    capsys.readouterr()
    assert run_cli("sweep", "--config", path, "--sweep-dir", "second", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "attention.type=dot,seed=1: continuing its run in first\n" in out
    assert out.endswith("second: 1 of 1 runs: 1 continuing\n") and not Path("second").exists()
    assert run_cli("sweep", "--config", path, "--sweep-dir", "second") == 0
    assert "continuing its run in first" in capsys.readouterr().err
    assert run_cli("sweep", "--config", path, "--sweep-dir", "second", "--dry-run") == 0
    assert "1 of 1 runs: 1 finished" in capsys.readouterr().out
    second = tmp_path / "second/runs/attention.type=dot,seed=1"
    assert "resumed" in (second / "train.log").read_text()
    assert json.loads((second / "summary.json").read_text())["steps"] == 8
    assert (second / "test/scores.json").is_file()
    assert (first / "test/scores.json").read_bytes() == scores  # the first budget's scores
    assert json.loads((first / "summary.json").read_text())["steps"] == 4
    assert (first / "checkpoints/last.pt").is_file()  # kept: a sweep run keeps its last

    straight = load_sweep(path).runs[0].config
    (tmp_path / "alone").mkdir()
    (tmp_path / "first/tokenizer").rename(tmp_path / "alone/tokenizer")
    train(straight, tmp_path / "alone")
    a = torch.load(tmp_path / "alone/checkpoints/last.pt", weights_only=True)["model"]
    b = torch.load(second / "checkpoints/last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


FIRST = {"grid": {"model.attention.type": ["dot", "general"]}, "seeds": [1, 2]}
THIRTY = Progress(step=30, epoch=2, elapsed=100.0)  # where the first sweep's runs stopped


def first_sweep(tmp_path, progress: Progress | None = THIRTY, **changes) -> SweepDir:
    """The sweep `first` (dot and general x seeds 1 and 2 at 30 updates), its runs finished
    by hand, their last checkpoints at `progress` (None: not finished)."""
    sweep = load_sweep(write_sweep(tmp_path, **FIRST, set={"train.max_steps": 30}, **changes))
    directory = SweepDir(tmp_path / "first")
    directory.adopt(sweep)
    for run in sweep.runs if progress else []:
        hand_made_run(directory.root, run, {"bleu": 1.0, "chrf": 1.0}, ["x"], [(30, 1.0)])
        last = directory.run(run).checkpoint("last")
        last.parent.mkdir()
        torch.save({"progress": asdict(progress)}, last)
    return directory


def continued(tmp_path, **changes) -> Path:
    """A sweep file that continues `first` to 60 updates, with `changes`."""
    sweep = {**FIRST, "name": "s2", "set": {"train.max_steps": 60}, "continue_from": "first"}
    return write_sweep(tmp_path, **(sweep | changes))


def refused(capsys, path: Path, sweep_dir: str = "second") -> str:
    """The one line that both the dry run and the sweep refuse `path` with; nothing written."""
    for dry_run in (["--dry-run"], []):
        capsys.readouterr()
        assert run_cli("sweep", "--config", path, "--sweep-dir", sweep_dir, *dry_run) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith("seq2seq: error: ")
    assert sweep_dir == "first" or not Path(sweep_dir).exists()
    return err


RUN = "attention.type=dot,seed=1"


@pytest.mark.parametrize(
    "first, changes, fragment",
    [
        ({}, {"continue_from": "nowhere"}, "continue_from nowhere: no such directory"),
        ({}, {"continue_from": "base.yaml"}, "continue_from base.yaml is a file"),
        (
            {},
            {"continue_from": f"first/runs/{RUN}"},
            f"continue_from first/runs/{RUN} is a run directory with no sweep.yaml, not a sweep "
            "directory; give the directory of the sweep it is a run of, first",
        ),
        (
            {},
            {"base_config": {**BASE, "model": {"embed_dim": 8, "hidden_dim": 16}}},
            f"continue_from first: its run {RUN} was trained with another config "
            "(model.hidden_dim: 8 -> 16); give this sweep the first one's base",
        ),
        (
            {},
            {"set": {"train.max_steps": 60, "train.label_smoothing": 0.2}},
            "(train.label_smoothing: 0.1 -> 0.2)",
        ),
        (
            {},
            {"grid": {"model.attention.type": ["dot"], "model.dropout": [0.1]}},
            "its grid fields are model.attention.type, this sweep's model.attention.type, "
            "model.dropout",
        ),
        (
            {},
            {"grid": {"model.attention.type": ["dot", "bahdanau"]}},
            "its grid has no model.attention.type=bahdanau (it has dot, general)",
        ),
        ({}, {"seeds": [1, 3]}, "it has no seed 3 (it has 1, 2); continue only seeds it has"),
        (
            {
                "cells": [{"model.attention.type": "dot"}],
                "baseline": {"model.attention.type": "dot"},
            },
            {},
            "it has no cell attention.type=general (its `cells:` leave it out)",
        ),
    ],
)
def test_a_sweep_that_cannot_continue_the_first_is_refused_before_anything_is_written(
    tmp_path, monkeypatch, capsys, first, changes, fragment
):
    monkeypatch.chdir(tmp_path)
    first_sweep(tmp_path, **first)
    assert fragment in refused(capsys, continued(tmp_path, **changes))


def test_a_sweep_cannot_continue_itself(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    definition = first_sweep(tmp_path).definition.read_bytes()
    err = refused(capsys, continued(tmp_path), sweep_dir="first")
    assert "continue_from first is this sweep's own directory" in err
    assert definition == (tmp_path / "first/sweep.yaml").read_bytes()


@pytest.mark.parametrize(
    "budgets, fragment",
    [
        (
            {"train.max_steps": 20},
            "has trained 30 updates already, and this sweep's train.max_steps is 20: continued, "
            "it would train nothing; raise train.max_steps above 30",
        ),
        ({"train.max_steps": 30}, "and this sweep's train.max_steps is 30"),
        ({"train.max_steps": 60, "train.max_epochs": 2}, "2 epochs already, and this sweep's "),
        ({"train.max_steps": 60, "train.max_time": "90s"}, "100 seconds already, and this swe"),
    ],
)
def test_a_budget_the_first_runs_have_reached_is_refused(
    tmp_path, monkeypatch, capsys, budgets, fragment
):
    """Each run would resume past (or at) its budget, stop at once and be tested again: the
    report would then show the first budget's models twice, under two budgets."""
    monkeypatch.chdir(tmp_path)
    first_sweep(tmp_path)
    err = refused(capsys, continued(tmp_path, set=budgets))
    assert "continue_from first: its run attention.type=general,seed=2 (and 3 more)" in err
    assert fragment in err


def test_a_larger_budget_continues_where_early_stopping_ended_the_first_runs(
    tmp_path, monkeypatch, capsys
):
    """Patience is no budget: a run it stopped stops again, as it would trained in one go."""
    monkeypatch.chdir(tmp_path)
    first_sweep(tmp_path, progress=Progress(step=30, epoch=2, elapsed=100.0, bad_validations=9))
    path = continued(tmp_path, set={"train.max_steps": 60, "train.patience": 1})
    assert run_cli("sweep", "--config", path, "--sweep-dir", "second", "--dry-run") == 0
    assert capsys.readouterr().out.endswith("second: 4 of 4 runs: 4 continuing\n")


def test_a_run_that_did_not_finish_cannot_be_continued(tmp_path, monkeypatch, capsys):
    """The first sweep is there, but not its run: that run fails alone, named, uncopied."""
    monkeypatch.chdir(tmp_path)
    first_sweep(tmp_path, progress=None)
    path = continued(tmp_path, grid={"model.attention.type": ["dot"]}, seeds=[1])
    assert run_cli("sweep", "--config", path, "--dry-run") == 0
    assert "continuing its run in first (not finished there" in capsys.readouterr().out
    assert run_cli("sweep", "--config", path) == 2
    err = capsys.readouterr().err
    assert f"first/runs/{RUN} is not a finished run" in err
    assert not Path(f"runs/sweeps/s2/runs/{RUN}").exists()
