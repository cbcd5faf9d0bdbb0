"""Sweeps: grid expansion and its checks, shards, the stored definition, the report on
hand-made run directories, and a small sweep end to end through the command line."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
import torch
import yaml
from cli_helpers import run_cli
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from seq2seq.config import ATTENTION_TYPES, load_config
from seq2seq.errors import UserError
from seq2seq.sweep import SweepDir, load_sweep, parse_shard
from seq2seq.sweep.report import results_csv, results_markdown
from seq2seq.sweep.results import collect
from seq2seq.sweep.spec import Shard
from seq2seq.train.run import train

ROOT = Path(__file__).resolve().parent.parent
BASE = {
    "name": "base",
    "data": {
        "src": "src",
        "tgt": "tgt",
        "train": "d/train",
        "valid": "d/valid",
        "test": ["d/test"],
    },
    "model": {"embed_dim": 8, "hidden_dim": 8},
}
SWEEP = {
    "name": "s",
    "base": "base.yaml",
    "grid": {"model.attention.type": ["local-m", "local-p"], "model.attention.window": [3, 5]},
    "seeds": [1, 2],
    "baseline": {"model.attention.type": "local-m", "model.attention.window": 3},
    "set": {"train.max_steps": 7},
}


def write_sweep(directory: Path, base_config: dict = BASE, **changes) -> Path:
    """base.yaml and a sweep file (SWEEP with `changes`) in `directory`, the working
    directory; a changed grid without a baseline gets its first cell as the baseline."""
    (directory / "base.yaml").write_text(yaml.safe_dump(base_config))
    if "grid" in changes and "baseline" not in changes:
        changes["baseline"] = {field: values[0] for field, values in changes["grid"].items()}
    path = directory / "sweep_file.yaml"
    path.write_text(yaml.safe_dump({**SWEEP, **changes}))
    return path


def test_grid_is_the_cartesian_product_times_seeds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = load_sweep(write_sweep(tmp_path))
    assert [c.key for c in sweep.cells] == [
        "attention.type=local-m,attention.window=3",
        "attention.type=local-m,attention.window=5",
        "attention.type=local-p,attention.window=3",
        "attention.type=local-p,attention.window=5",
    ]
    assert sweep.baseline is sweep.cells[0]
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
    ({"grid": {"seed": [1, 2]}}, ["grid sets 'seed'", "seeds:"]),
    (
        {"baseline": {"model.attention.type": "bahdanau", "model.attention.window": 3}},
        ["baseline attention.type=bahdanau,attention.window=3 is not a cell"],
    ),
    ({"baseline": {"model.attention.type": "dot"}}, ["a value for each grid field"]),
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
        assert sweep.baseline in sweep.cells and sweep.runs, path
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


def test_report_aggregates_hand_made_runs(tmp_path, monkeypatch):
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
    poor = {1: [r.split()[0] for r in REFERENCES], 2: [" ".join(r.split()[:3]) for r in REFERENCES]}
    known = {  # cell, seed -> BLEU, chrF
        (bahdanau, 1): (20.0, 30.0), (bahdanau, 2): (24.0, 33.0),
        (dot, 1): (100.0, 100.0), (dot, 2): (99.0, 98.0),
        (general, 1): (50.0, 60.0),
    }  # fmt: skip
    for (cell, seed), (bleu, chrf) in known.items():
        hypotheses = poor[seed] if cell is bahdanau else REFERENCES
        curve = [(10, bleu / 2), (20, bleu)] if seed == 1 else [(10, bleu / 4), (20, bleu)]
        run = sweep.run(cell, seed)
        hand_made_run(directory.root, run, {"bleu": bleu, "chrf": chrf}, hypotheses, curve)
    interrupted = directory.run(sweep.run(general, 2))
    interrupted.checkpoints.mkdir(parents=True)
    interrupted.checkpoint("last").write_bytes(b"")

    results = collect(directory)
    assert [c.cell for c in results.cells] == [bahdanau, dot, general]
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

    # The p-value is sacrebleu's paired bootstrap on both seeds' hypotheses concatenated.
    test = PairedTest(
        [("base", poor[1] + poor[2]), ("dot", REFERENCES * 2)],
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
    short = BLEU().corpus_score(poor[1][:20] + poor[2][:20], [REFERENCES[:20] * 2]).score
    assert base.by_length["test"][0] == (20, pytest.approx(short, abs=0.005))

    table = results_markdown(results)
    assert "| bahdanau (baseline) | 2 | 22.00 ± 2.83 | baseline |" in table
    assert f"| dot | 2 | 99.50 ± 0.71 | {expected:.3f} * |" in table
    assert "| general | 1 | 50.00 ± - |" in table
    assert "| best step | valid ppl | train s |" in table
    assert f"| 20 | {math.exp(4.0):.2f} | 10 |" in table  # general: BLEU 50 at step 20
    assert "`attention.type=general,seed=2`: interrupted" in table
    assert "| cell | 1-9 (20) | 10-14 (10) | 15-19 (0) | 20+ (0) |" in table
    assert "| dot | 100.00 | 100.00 | - | - |" in table
    rows = results_csv(results).splitlines()
    assert rows[0].startswith("model.attention.type,baseline,seeds,test_bleu_mean,test_bleu_std")
    assert rows[1].startswith("bahdanau,True,1 2,22.0,2.8284,,31.5,")


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

    assert run_cli("sweep", "--config", path, "--shard", "1/2") == 0
    err = capsys.readouterr().err
    assert "training the shared tokenizer" in err and "2 of 4 runs finished" in err
    partial = (root / "report/results.md").read_text()
    assert "## Not finished" in partial and "`attention.type=dot,seed=2`: not started" in partial
    first_log = (root / "runs" / first.name / "train.log").read_text()
    assert "from step 2" in first_log
    assert json.loads((root / "runs" / first.name / "summary.json").read_text())["steps"] == 4

    assert run_cli("sweep", "--config", path, "--shard", "2/2") == 0
    capsys.readouterr()
    last = {p: p.stat().st_mtime_ns for p in root.glob("runs/*/checkpoints/last.pt")}
    assert len(last) == 4
    assert run_cli("sweep", "--config", path) == 0  # nothing left: every run is skipped
    out, err = capsys.readouterr()
    assert err.count("finished, skipped") == 4 and "4 of 4 runs finished" in err
    assert last == {p: p.stat().st_mtime_ns for p in last}
    assert "| dot | 2 |" in out  # the table, on stdout

    shared = (root / "tokenizer/joint.model").read_bytes()
    for run in sweep.runs[1:]:  # the first trained its own when it was run alone
        assert (root / "runs" / run.name / "tokenizer/joint.model").read_bytes() == shared
        # The shared tokenizer came with the corpus ids: no run tokenized the corpus.
        assert (
            "piece ids of 300 pairs read from"
            in (root / "runs" / run.name / "train.log").read_text()
        )
    report = root / "report"
    for name in ("bleu.png", "curves.png", "length-test.png", "attention.png"):
        assert (report / name).read_bytes().startswith(b"\x89PNG"), name
    assert "Not finished" not in (report / "results.md").read_text()
    assert len((report / "results.csv").read_text().splitlines()) == 3
    assert len(list((report / "tensorboard").glob("*/events.out.tfevents.*"))) == 2
    assert run_cli("sweep", "report", root) == 0
    assert not list(root.glob(".report*"))  # the replaced report is cleaned up
    # What a study commits (docs/results/.gitignore) rebuilds the same report: the
    # heatmaps come from each run's best-attention.json once the checkpoints are gone.
    dropped = ("checkpoints", "tokenizer", "tensorboard", "attention", "valid")
    kept = tmp_path / "kept"
    shutil.copytree(root, kept, ignore=shutil.ignore_patterns(*dropped))
    assert run_cli("sweep", "report", kept) == 0
    for name in ("results.csv", "results.md", "attention.png", "bleu.png"):
        assert (kept / "report" / name).read_bytes() == (report / name).read_bytes(), name
    for saved in kept.glob("runs/*/best-attention.json"):
        saved.unlink()
    assert run_cli("sweep", "report", kept) == 0
    assert not (kept / "report/attention.png").exists()
    assert "No attention heatmaps" in (kept / "report/results.md").read_text()
    # A run of a sweep is an ordinary run directory: same as `seq2seq train` of its config.
    alone = tmp_path / "alone"
    shutil.copytree(root / "tokenizer", alone / "tokenizer")
    train(sweep.runs[1].config, alone)
    a = torch.load(alone / "checkpoints/last.pt", weights_only=True)["model"]
    b = torch.load(root / "runs" / sweep.runs[1].name / "checkpoints/last.pt", weights_only=True)
    assert all(torch.equal(a[k], b["model"][k]) for k in a)


def test_a_failing_run_does_not_stop_the_others(toy, tmp_path, monkeypatch, capsys):
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


def test_runs_record_the_commit_the_process_started_with(monkeypatch):
    """A sweep's later runs start after commits made while it runs: meta.json names the
    code the process imported, asked of git once."""
    from seq2seq.train import run as run_module

    run_module._git_revision.cache_clear()
    first = run_module._git_revision()
    monkeypatch.setattr(run_module.subprocess, "run", lambda *a, **k: pytest.fail("git again"))
    assert run_module._git_revision() == first
