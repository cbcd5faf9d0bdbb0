"""Sweeps of chosen cells (`cells:`) and sweeps that continue another (`continue_from:`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli
from sweep_helpers import write_sweep

from seq2seq.config import load_config
from seq2seq.errors import UserError
from seq2seq.sweep import load_sweep
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


def test_a_continuing_sweep_trains_on_from_the_finished_runs(toy, tmp_path, monkeypatch, capsys):
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


def test_a_run_that_did_not_finish_cannot_be_continued(toy, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    base = load_config(toy / "run.yaml").to_dict()
    path = write_sweep(
        tmp_path,
        base_config=base,
        grid={"model.attention.type": ["dot"]},
        seeds=[1],
        set={"train.max_steps": 2, "train.threads": 1},
        continue_from="nowhere",
    )
    assert run_cli("sweep", "--config", path, "--dry-run") == 0
    assert "continuing its run in nowhere (not finished there" in capsys.readouterr().out
    assert run_cli("sweep", "--config", path) == 2
    err = capsys.readouterr().err
    assert "nowhere/runs/attention.type=dot,seed=1 is not a finished run" in err
    assert not Path("runs/sweeps/s/runs/attention.type=dot,seed=1").exists()
