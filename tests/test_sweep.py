"""Sweeps: grid expansion and its checks, shards, the stored definition, and a small
sweep end to end through the command line (the report's arithmetic: test_sweep_report.py)."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import pytest
import torch
import yaml
from cli_helpers import run_cli
from sweep_helpers import BASE, SWEEP, charts_undrawn, write_sweep

from seq2seq.checkpoint import RunDir, training_lock
from seq2seq.config import ATTENTION_TYPES, load_config
from seq2seq.errors import UserError
from seq2seq.sweep import SweepDir, load_sweep, parse_shard
from seq2seq.sweep.kept_attention import initial_sites, save_best_attention
from seq2seq.sweep.running.one_run import Status, train_run
from seq2seq.sweep.spec import Shard
from seq2seq.train.run import train

ROOT = Path(__file__).resolve().parent.parent


def test_grid_is_the_cartesian_product_times_seeds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = load_sweep(write_sweep(tmp_path))
    assert [c.key for c in sweep.cells] == [
        "attention.type=local-m,attention.window=3",
        "attention.type=local-m,attention.window=5",
        "attention.type=local-p,attention.window=3",
        "attention.type=local-p,attention.window=5",
    ]
    assert [sweep.baseline.of(c) for c in sweep.cells] == [sweep.cells[0]] * 4
    assert len(sweep.runs) == 8 and len({r.name for r in sweep.runs}) == 8
    assert [r.seed for r in sweep.runs] == [1] * 4 + [2] * 4  # seed by seed
    run = sweep.runs[6]
    assert run.name == "attention.type=local-p,attention.window=3,seed=2"
    cfg = run.config
    assert (cfg.seed, cfg.model.attention.type, cfg.model.attention.window) == (2, "local-p", 3)
    assert cfg.train.max_steps == 7 and cfg.model.embed_dim == 8  # `set` and the base
    assert {r.tokenizer for r in sweep.runs} == {"tokenizer"}  # one, shared by all runs
    assert sweep.runs[0].config.name == "s-attention.type-local-m-attention.window-3-seed-1"


def test_a_grid_over_the_tokenizer_gets_a_tokenizer_per_value(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    grid = {"tokenizer.vocab_size": [50, 60], "model.attention.type": ["dot"]}
    sweep = load_sweep(write_sweep(tmp_path, grid=grid))
    assert {r.tokenizer for r in sweep.runs} == {
        "tokenizers/tokenizer.vocab_size=50",
        "tokenizers/tokenizer.vocab_size=60",
    }
    # a tag is one of the tokenizer's symbols: tagged and untagged cells train their own
    grid = {"data.tags": [None, ["<bt>"]], "model.attention.type": ["dot"]}
    (tmp_path / "tags").mkdir()
    tagged = load_sweep(write_sweep(tmp_path / "tags", grid=grid))
    assert len({r.tokenizer for r in tagged.runs}) == 2


BAD_SWEEPS = [  # changes to SWEEP, fragments of the one-line error
    (
        {"grid": {"model.atention.type": ["dot"]}},
        ["'model.atention.type' is not a config field", "did you mean model.attention.type"],
    ),
    (
        {"grid": {"model.attention.type": ["dot", "nope"]}},
        ["cell attention.type=nope", "unknown attention type 'nope'"],
    ),
    ({"grid": {"model.attention.type": ["dot", "dot"]}}, ["lists a value twice"]),
    (
        {"grid": {"model.dropout": [0, 0.0]}},
        ["cells model.dropout=0 and model.dropout=0.0 are one config", "list each value once"],
    ),
    ({"grid": {"seed": [1, 2]}}, ["grid sets 'seed'", "seeds:"]),
    (
        {"baseline": {"model.attention.type": "bahdanau", "model.attention.window": 3}},
        ["baseline attention.type=bahdanau is not a value of the grid"],
    ),
    ({"baseline": {"model.attention.typ": "dot"}}, ["a value for each grid field, or for some"]),
    ({"baseline": {}}, ["it gives none"]),
    ({"set": {"train.max_steps": -1}}, ["with `set`", "train.max_steps = -1"]),
    ({"set": {"model.attention.type": "dot"}}, ["in both grid and set"]),
    ({"seeds": [1, 1]}, ["a seed is listed twice"]),
    ({"seeds": []}, ["seeds"]),
    ({"grids": {}}, ["unknown key 'grids'", "allowed here: name, base, grid, seeds, baseline"]),
    ({"base": "missing.yaml"}, ["base config missing.yaml not found", "working directory"]),
]


@pytest.mark.parametrize("changes, fragments", BAD_SWEEPS)
def test_bad_sweep_files_name_the_problem(tmp_path, monkeypatch, changes, fragments):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as error:
        load_sweep(write_sweep(tmp_path, **changes))
    message = str(error.value)
    assert "\n" not in message and message.startswith(str(tmp_path / "sweep_file.yaml"))
    for fragment in fragments:
        assert fragment in message


def test_a_baseline_of_some_fields_compares_within_the_others(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = load_sweep(write_sweep(tmp_path, baseline={"model.attention.type": "local-m"}))
    m3, m5, p3, p5 = sweep.cells
    assert [sweep.baseline.of(c) for c in sweep.cells] == [m3, m5, m3, m5]
    assert [sweep.baseline.holds(c) for c in sweep.cells] == [True, True, False, False]
    assert sweep.baseline.text == "`attention.type=local-m` at each attention.window"
    cells = [{"model.attention.type": "local-p", "model.attention.window": 5}]
    with pytest.raises(UserError, match="baseline attention.type=local-m,attention.window=5 of "):
        load_sweep(write_sweep(tmp_path, baseline={"model.attention.type": "local-m"}, cells=cells))


def test_bad_sweep_file_on_the_command_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write_sweep(tmp_path, grid={"model.attention.type": ["nope"]})
    assert run_cli("sweep", "--config", path) == 2
    assert "unknown attention type 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # checked before anything runs
    assert run_cli("sweep", "--config", path, "--shard", "3/2") == 2
    assert run_cli("sweep", "report", tmp_path / "nowhere") == 2
    assert "not a sweep directory" in capsys.readouterr().err


@pytest.mark.parametrize("count", [1, 2, 3, 5, 9])
def test_shards_are_disjoint_and_cover_the_sweep(tmp_path, monkeypatch, count):
    monkeypatch.chdir(tmp_path)
    runs = load_sweep(write_sweep(tmp_path)).runs
    shards = [Shard(i, count).select(runs) for i in range(1, count + 1)]
    names = [run.name for shard in shards for run in shard]
    assert sorted(names) == sorted(r.name for r in runs)  # every run exactly once
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    assert parse_shard(f"{count}/{count}") == Shard(count, count)


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_bad_shards(text):
    with pytest.raises(UserError, match="expected i/n with 1 <= i <= n"):
        parse_shard(text)


def test_shipped_sweep_files_expand(monkeypatch):
    monkeypatch.chdir(ROOT)
    for path in sorted((ROOT / "configs/sweeps").glob("*.yaml")):
        sweep = load_sweep(path)
        assert sweep.runs and any(map(sweep.baseline.holds, sweep.cells)), path
    # The attention study: every registered type in the RNN, 3 seeds; in the Transformer
    # every type but the two that are another type's model there, at least 2 seeds.
    rnn = load_sweep(ROOT / "configs/sweeps/attention_rnn.yaml")
    assert {dict(c.values)["model.attention.type"] for c in rnn.cells} == set(ATTENTION_TYPES)
    assert rnn.definition.seeds == [1, 2, 3]
    transformer = load_sweep(ROOT / "configs/sweeps/attention_transformer.yaml")
    types = {dict(c.values)["model.attention.type"] for c in transformer.cells}
    assert types == set(ATTENTION_TYPES) - {"bahdanau", "scaled-dot"}
    assert len(transformer.definition.seeds) >= 2


def test_a_changed_sweep_file_is_refused_an_extended_one_adopted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    directory = SweepDir(tmp_path / "sweep")
    directory.adopt(load_sweep(write_sweep(tmp_path)))
    extended = {**SWEEP["grid"], "model.attention.window": [3, 5, 7]}
    directory.adopt(load_sweep(write_sweep(tmp_path, grid=extended, seeds=[1, 2, 3])))
    assert len(directory.load().runs) == 18  # sweep.yaml now holds the extended sweep
    base = {**BASE, "model": {"embed_dim": 16, "hidden_dim": 16}}  # the base file's content
    for changes, fragment in [
        ({"grid": extended, "set": {"train.max_steps": 8}}, "train.max_steps: 7 -> 8"),
        ({"grid": {"model.attention.type": ["dot"]}}, "grid fields"),
        ({"grid": extended, "base_config": base}, "model.embed_dim: 8 -> 16"),
    ]:
        with pytest.raises(UserError, match="pass a new --sweep-dir") as error:
            directory.adopt(load_sweep(write_sweep(tmp_path, **changes)))
        assert fragment in str(error.value)


def test_a_definition_stored_before_a_field_existed_is_read_with_its_default(tmp_path, monkeypatch):
    """Runs trained before `data.alignments` joined the schema behave as its default: the
    stored definition, lacking the field, is the same sweep; a field the schema no longer
    has is a change."""
    monkeypatch.chdir(tmp_path)
    directory = SweepDir(tmp_path / "sweep")
    directory.adopt(load_sweep(write_sweep(tmp_path)))

    def store(edit):
        stored = yaml.safe_load(directory.definition.read_text())
        edit(stored["config"])
        directory.definition.write_text(yaml.safe_dump(stored, sort_keys=False))

    store(lambda config: config["data"].pop("alignments"))
    directory.adopt(load_sweep(write_sweep(tmp_path)))
    assert yaml.safe_load(directory.definition.read_text())["config"]["data"]["alignments"] is False
    store(lambda config: config["data"].update(retired=1))
    with pytest.raises(UserError, match="the stored config no longer reads.*data.retired"):
        directory.adopt(load_sweep(write_sweep(tmp_path)))
    store(lambda config: config["data"].pop("retired"))
    changed = {"train.max_steps": 7, "data.alignments": True}
    with pytest.raises(UserError, match="data.alignments: False -> True"):
        directory.adopt(load_sweep(write_sweep(tmp_path, set=changed)))


def test_a_finished_run_keeps_its_attention_files_at_once(toy, tmp_path, monkeypatch):
    """A run trained by the sweep measures init-attention.json and best-attention.json as it
    finishes, as the report would: its directory rebuilds the report without checkpoints
    even if no report ran before they were gone."""
    monkeypatch.chdir(tmp_path)
    # The heatmap translates greedily, whatever decoding the run tests with (MBR here).
    settings = {"train.max_steps": 2, "train.valid_every": 2, "train.threads": 1,
                "train.attention_diagnostics": True, "decode.beam": 4, "decode.mbr": 4}  # fmt: skip
    path = write_sweep(tmp_path, base_config=load_config(toy / "run.yaml").to_dict(),
                       grid={"model.attention.type": ["dot"]}, seeds=[1], set=settings)  # fmt: skip
    sweep, directory = load_sweep(path), SweepDir(tmp_path / "s")
    directory.adopt(sweep)
    assert train_run(directory, sweep, sweep.runs[0]).status is Status.TRAINED
    run = directory.run(sweep.runs[0])
    kept = {path: path.read_bytes() for path in (run.initial_attention, run.best_attention)}
    for path in kept:
        path.unlink()
    cfg = sweep.runs[0].config
    assert initial_sites(run, cfg) == json.loads(kept[run.initial_attention])
    save_best_attention(run, cfg)
    assert run.best_attention.read_bytes() == kept[run.best_attention]


def test_sweep_end_to_end(toy, tmp_path, monkeypatch, capsys):
    """2 cells x 2 seeds on the tiny corpus: in two shards (one run interrupted and
    resumed), then again with nothing left to do."""
    monkeypatch.chdir(tmp_path)
    path = write_sweep(
        tmp_path,
        base_config=load_config(toy / "run.yaml").to_dict(),
        grid={"model.attention.type": ["bahdanau", "dot"]},
        set={"train.max_steps": 4, "train.valid_every": 100, "train.threads": 1, "decode.beam": 2},
    )
    root = tmp_path / "runs/sweeps/s"
    sweep = load_sweep(path)
    # An interrupted run: 2 of its 4 steps done, as a kill after a checkpoint leaves it.
    first = sweep.runs[0]
    halfway = first.config.model_copy(deep=True)
    halfway.train.max_steps = 2
    train(halfway, root / "runs" / first.name)
    (root / "runs" / first.name / "test/scores.json").unlink()

    with charts_undrawn():  # the last report's are drawn, and read below
        assert run_cli("sweep", "--config", path, "--shard", "1/2") == 0
    err = capsys.readouterr().err
    assert "training the shared tokenizer" in err and "2 of 4 runs finished" in err
    partial = (root / "report/results.md").read_text()
    assert "## Not finished" in partial and "`attention.type=dot,seed=2`: not started" in partial
    first_log = (root / "runs" / first.name / "train.log").read_text()
    assert "from step 2" in first_log
    assert json.loads((root / "runs" / first.name / "summary.json").read_text())["steps"] == 4

    with charts_undrawn():
        assert run_cli("sweep", "--config", path, "--shard", "2/2") == 0
    capsys.readouterr()
    last = {p: p.stat().st_mtime_ns for p in root.glob("runs/*/checkpoints/last.pt")}
    assert len(last) == 4
    assert run_cli("sweep", "--config", path) == 0  # nothing left: every run is skipped
    out, err = capsys.readouterr()
    assert err.count("finished, skipped") == 4 and "4 of 4 runs finished" in err
    assert last == {p: p.stat().st_mtime_ns for p in last}
    assert "| dot | 2 |" in out  # the table, on stdout
    assert not list(root.glob(".report*"))  # the replaced report is cleaned up

    assert_runs_share_the_tokenizer(root, sweep)
    assert_report_is_complete(root / "report")
    assert_committed_artefacts_rebuild_the_report(root, tmp_path / "kept")
    assert_run_equals_plain_training(root, sweep.runs[1], tmp_path / "alone")


def assert_runs_share_the_tokenizer(root: Path, sweep) -> None:
    shared = (root / "tokenizer/joint.model").read_bytes()
    (prepared,) = (root / "tokenizer/corpora").iterdir()
    for run in sweep.runs[1:]:  # the first trained its own when it was run alone
        log = (root / "runs" / run.name / "train.log").read_text()
        assert (root / "runs" / run.name / "tokenizer/joint.model").read_bytes() == shared
        # The shared tokenizer came with the prepared corpus: no run prepared it again, and
        # every run maps the same files (hard links: one copy on disk and in memory).
        assert "preparing" not in log
        for name in ("src.ids", "tgt.ids", "src.offsets", "tgt.offsets"):
            mine = root / "runs" / run.name / "tokenizer/corpora" / prepared.name / name
            assert mine.stat().st_ino == (prepared / name).stat().st_ino


def assert_report_is_complete(report: Path) -> None:
    """Every chart, the table of all four runs and one TensorBoard log per cell."""
    for name in ("bleu.png", "curves.png", "length-test.png", "attention.png"):
        assert (report / name).read_bytes().startswith(b"\x89PNG"), name
    assert "Not finished" not in (report / "results.md").read_text()
    assert len((report / "results.csv").read_text().splitlines()) == 3
    assert len(list((report / "tensorboard").glob("*/events.out.tfevents.*"))) == 2


def assert_committed_artefacts_rebuild_the_report(root: Path, kept: Path) -> None:
    """What a study commits (docs/results/.gitignore) rebuilds the same report: the
    heatmaps come from each run's best-attention.json once the checkpoints are gone."""
    dropped = ("checkpoints", "tokenizer", "tensorboard", "attention", "valid")
    shutil.copytree(root, kept, ignore=shutil.ignore_patterns(*dropped))
    assert run_cli("sweep", "report", kept) == 0  # over the copied report: replaced
    assert not list(kept.glob(".report*"))
    for name in ("results.csv", "results.md", "attention.png", "bleu.png"):
        rebuilt, first = kept / "report" / name, root / "report" / name
        assert rebuilt.read_bytes() == first.read_bytes(), name
    for saved in kept.glob("runs/*/best-attention.json"):
        saved.unlink()
    with charts_undrawn():
        assert run_cli("sweep", "report", kept) == 0
    assert not (kept / "report/attention.png").exists()
    assert "No attention heatmaps" in (kept / "report/results.md").read_text()


def assert_run_equals_plain_training(root: Path, run, alone: Path) -> None:
    """A run of a sweep is an ordinary run directory: the same weights as `seq2seq
    train` of its config with the sweep's tokenizer."""
    shutil.copytree(root / "tokenizer", alone / "tokenizer")
    train(run.config, alone)
    a = torch.load(alone / "checkpoints/last.pt", weights_only=True)["model"]
    b = torch.load(root / "runs" / run.name / "checkpoints/last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_failing_run_does_not_stop_the_others(toy, tmp_path, monkeypatch, capsys, undrawn_charts):
    monkeypatch.chdir(tmp_path)
    path = write_sweep(
        tmp_path,
        base_config=load_config(toy / "run.yaml").to_dict(),
        grid={"data.max_len": [1, 40]},  # no training pair is 1 piece long
        seeds=[1],
        set={"train.max_steps": 2, "train.threads": 1, "decode.beam": 1},
    )
    assert run_cli("sweep", "--config", path) == 2
    err = capsys.readouterr().err
    assert "[1/2] data.max_len=1,seed=1 failed: no training pair is at most 1 pieces" in err
    assert "1 run(s) of sweep s failed (data.max_len=1,seed=1)" in err.splitlines()[-1]
    assert (tmp_path / "runs/sweeps/s/runs/data.max_len=40,seed=1/test/scores.json").is_file()


def test_a_run_another_process_trains_is_skipped_and_named(
    toy, tmp_path, monkeypatch, capsys, undrawn_charts
):
    """The same sweep started twice on one directory: the second leaves the first's run
    alone, trains the rest, and says who holds the run."""
    monkeypatch.chdir(tmp_path)
    path = write_sweep(
        tmp_path,
        base_config=load_config(toy / "run.yaml").to_dict(),
        grid={"data.max_len": [40, 50]},
        seeds=[1],
        set={"train.max_steps": 2, "train.threads": 1, "decode.beam": 1},
    )
    runs = tmp_path / "runs/sweeps/s/runs"
    with training_lock(RunDir(runs / "data.max_len=40,seed=1")):
        assert run_cli("sweep", "--config", path) == 2
    err = capsys.readouterr().err
    holder = f"process {os.getpid()} on {socket.gethostname()}"
    assert "[1/2] data.max_len=40,seed=1 skipped: " in err and holder in err
    assert "1 run(s) of sweep s are being trained by another process" in err.splitlines()[-1]
    assert not (runs / "data.max_len=40,seed=1/checkpoints").exists()
    assert (runs / "data.max_len=50,seed=1/test/scores.json").is_file()


def test_runs_record_the_commit_the_process_started_with(monkeypatch):
    """A sweep's later runs start after commits made while it runs: meta.json names the
    code the process imported, asked of git once."""
    from seq2seq.train import run as run_module

    run_module._git_revision.cache_clear()
    first = run_module._git_revision()
    monkeypatch.setattr(run_module.subprocess, "run", lambda *a, **k: pytest.fail("git again"))
    assert run_module._git_revision() == first
