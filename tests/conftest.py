"""Shared test helpers."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from cli_helpers import train
from sweep_helpers import FAST, charts_undrawn, write_sweep

import seq2seq.attention  # noqa: F401  (registers the attention types with the config schema)
from seq2seq import metrics
from seq2seq.config import load_config
from seq2seq.data.toy import make_toy_corpus
from seq2seq.sweep import load_sweep, run_sweep

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def pytest_configure(config):
    """Under pytest-xdist, each worker gets its share of the CPUs: the code under test sizes
    its threads from the CPUs it may use, and two workers on every core would each wait
    on the other's threads (many times slower than one thread each)."""
    worker, count = (
        os.environ.get("PYTEST_XDIST_WORKER"),
        os.environ.get("PYTEST_XDIST_WORKER_COUNT"),
    )
    if worker is None or count is None or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, cpus[int(worker.removeprefix("gw")) :: int(count)] or cpus)


@pytest.fixture
def load_script(monkeypatch):
    """Import a file of scripts/ (not a package) as a module."""

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        # Where dataclasses look up the module's annotations; gone after the test.
        monkeypatch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def bench_row(load_script, monkeypatch):
    """The row of a `scripts/bench.py MODE OPTIONS` measurement (train, diagnostics),
    measured in this process: bench.py spawns a fresh one for it, whose imports alone cost
    seconds (its decode test goes through that)."""

    def measure(*argv: str) -> dict:
        monkeypatch.syspath_prepend(str(SCRIPTS))  # where bench.py finds its parts
        bench = load_script("bench")
        monkeypatch.setattr(sys, "argv", ["bench.py", *argv])
        args = bench.parse_arguments()
        modes = {"train": bench.measure_train, "diagnostics": bench.measure_diagnostics}
        return bench.with_peak_memory(modes[args.mode], args)

    return measure


@pytest.fixture
def add_metric(monkeypatch):
    """Append a metric to `metrics.METRICS` as one more entry written in the table would:
    every module that imported the table sees the longer one, for this test."""

    def add(metric: metrics.Metric) -> None:
        table = metrics.METRICS
        for name, module in list(sys.modules.items()):
            if name.startswith("seq2seq") and getattr(module, "METRICS", None) is table:
                monkeypatch.setattr(module, "METRICS", (*table, metric))

    return add


@pytest.fixture(scope="session")
def toy(tmp_path_factory) -> Path:
    """A tiny toy corpus and a run config for it (RNN, 16 dims): for end-to-end tests."""
    root = tmp_path_factory.mktemp("toy")
    make_toy_corpus(root / "data", seed=3, train=300, valid=12, test=10, max_words=5)
    config = {
        "name": "tiny",
        "data": {
            "src": "src",
            "tgt": "tgt",
            "train": str(root / "data/train"),
            "valid": str(root / "data/valid"),
            "test": [str(root / "data/test")],
        },
        "tokenizer": {"vocab_size": 120},
        "model": {"embed_dim": 16, "hidden_dim": 16, "dropout": 0.2},
        # One thread: a 16-dim model gains nothing from two, and the suite runs faster. No
        # heatmaps: drawing them takes most of a toy validation's time (the shared runs
        # below draw them, for the tests that read them).
        "train": {
            "heatmaps": 0,
            "batch_tokens": 200,
            "valid_every": 2,
            "log_every": 1,
            "keep_best": 2,
            "threads": 1,
        },
    }
    (root / "run.yaml").write_text(yaml.safe_dump(config))
    return root


@pytest.fixture(scope="session")
def six_steps(toy, tmp_path_factory) -> Path:
    """The toy config trained for 6 steps without a stop (validations and resume checkpoints
    at 2, 4 and 6): the uninterrupted run that resumed and interrupted ones must equal."""
    run_dir = tmp_path_factory.mktemp("six_steps") / "straight"
    assert train(toy, run_dir, "train.max_steps=6", all_heatmaps=True) == 0
    return run_dir


@pytest.fixture(scope="session")
def trained(toy, tmp_path_factory) -> Path:
    """A run of the toy config trained for 30 steps: for tests that translate with one, and
    the uninterrupted run a stopped and resumed one must equal."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    # One heatmap a validation: what its readers look at (six_steps draws three).
    budget = ["train.max_steps=30", "train.valid_every=10", "train.heatmaps=1"]
    assert train(toy, run_dir, *budget) == 0
    return run_dir


@pytest.fixture(scope="session")
def sequential(toy, tmp_path_factory) -> tuple[Path, Path]:
    """The sweep file of two runs (two cells, seed 1) and the sweep trained one run after
    another in this process; its base is an absolute path, for any working directory."""
    where = tmp_path_factory.mktemp("sequential")
    path = write_sweep(
        where,
        base_config=load_config(toy / "run.yaml").to_dict(),
        base=str(where / "base.yaml"),
        grid={"model.attention.type": ["bahdanau", "dot"]},
        seeds=[1],
        set=FAST,
    )
    with charts_undrawn():
        run_sweep(load_sweep(path), where / "one-after-another")
    return path, where / "one-after-another"


@pytest.fixture
def undrawn_charts() -> Iterator[None]:
    """This test's sweep reports leave their charts blank (sweep_helpers.charts_undrawn)."""
    with charts_undrawn():
        yield
