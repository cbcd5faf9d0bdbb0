"""The sweep report's attention diagnostics, on hand-made summaries of known values."""

from __future__ import annotations

import json
import shutil
import statistics

import pytest
from sweep_helpers import BASE, row, write_sweep

from seq2seq import Translator
from seq2seq.checkpoint import RunDir
from seq2seq.data.sources import read_corpus
from seq2seq.sweep import SweepDir, load_sweep
from seq2seq.sweep.kept_attention import check_kept_attention, initial_sites
from seq2seq.sweep.reporting import diagnostics
from seq2seq.sweep.reporting.diagnostics import (
    CHART,
    CURVES,
    LOCKED,
    RUN_CURVES,
    RUNS_CHART,
    write_diagnostics,
)
from seq2seq.sweep.reporting.results import collect


def site(queries: str, keys: str, entropy_norm: float, **scales: float) -> dict:
    mean = {"entropy_norm": entropy_norm, "energy_std": 2 * entropy_norm, "sink_mass": 0.1}
    return {"heads": 1, "queries": queries, "keys": keys, "mean": mean | scales}


def finished_run(directory: SweepDir, run, best_step: int, attention: dict[int, dict]) -> None:
    path = directory.run(run).root
    (path / "test").mkdir(parents=True)
    (path / "config.yaml").write_text(run.config.to_yaml())
    (path / "test/scores.json").write_text("{}")  # finished, with no test set
    validations = [
        {"step": step, "bleu": 1.0, "chrf": 1.0, "loss": 1.0, "attention": sites}
        for step, sites in attention.items()
    ]
    summary = {"steps": 20, "best_step": best_step, "train_seconds": 1.0, "parameters": 1,
               "target_tokens_per_s": 1.0, "validations": validations}  # fmt: skip
    (path / "summary.json").write_text(json.dumps(summary))


def sweep_of(tmp_path, types: list[str], **fixed):
    """A sweep over attention types with no test set (scores.json {} is whole), adopted;
    `fixed`: the sweep's `set`."""
    no_test_set = {**BASE, "data": {**BASE["data"], "test": []}}
    grid = {"model.attention.type": types}
    path = write_sweep(tmp_path, base_config=no_test_set, grid=grid, set=fixed)
    sweep = load_sweep(path)
    directory = SweepDir(tmp_path / "sweep")
    directory.adopt(sweep)
    return sweep, directory


def test_the_report_averages_cross_attention_over_layers_and_seeds_at_the_best_step(
    tmp_path, monkeypatch, undrawn_charts
):
    monkeypatch.chdir(tmp_path)
    sweep, directory = sweep_of(tmp_path, ["dot", "cosine"])
    dot, cosine = sweep.cells
    for seed, (early, late) in {1: (0.8, 0.6), 2: (0.6, 0.4)}.items():
        sites = {step: {"decoder.attention": site("target", "source", value)}
                 for step, value in ((10, early), (20, late))}  # fmt: skip
        finished_run(directory, sweep.run(dot, seed), 20, sites)
    layers = {  # two decoder layers' cross-attention count; self-attention does not
        "encoder_layers.0.self_attention": site("source", "source", 0.9),
        "decoder_layers.0.cross_attention": site("target", "source", 0.2, temperature=8.0),
        "decoder_layers.1.cross_attention": site("target", "source", 0.4, temperature=12.0),
    }
    finished_run(directory, sweep.run(cosine, 1), 10, {10: layers, 20: {}})
    finished_run(directory, sweep.run(cosine, 2), 10, {10: layers})

    out = tmp_path / "report"
    out.mkdir()
    markdown = write_diagnostics(collect(directory), out).splitlines()
    assert (out / CHART).read_bytes().startswith(b"\x89PNG")
    heading, dot_row, cosine_row = (row(markdown, first) for first in ("cell", "dot", "cosine"))
    column = heading.index("entropy_norm")
    assert dot_row[1] == "2" and dot_row[column] == f"0.5 ± {statistics.stdev([0.6, 0.4]):.2g}"
    assert cosine_row[1] == "2" and cosine_row[column] == "0.3 ± 0"
    assert heading.count("temperature") == 1
    assert cosine_row[heading.index("temperature")] == "10 ± 0" and dot_row[-1] == "-"
    assert "entropy" not in heading  # in no run's summary: no column
    assert f"![attention diagnostics over updates]({CHART})" in markdown
    assert (out / RUNS_CHART).read_bytes().startswith(b"\x89PNG")
    assert f"![every run's attention over updates]({RUNS_CHART})" in markdown


def test_a_run_tested_at_its_last_checkpoint_reports_its_last_validation(
    tmp_path, monkeypatch, undrawn_charts
):
    """train.test_checkpoint: last: the tested weights are the last, not the best."""
    monkeypatch.chdir(tmp_path)
    sweep, directory = sweep_of(tmp_path, ["dot"], **{"train.test_checkpoint": "last"})
    sites = {step: {"decoder.attention": site("target", "source", value)}
             for step, value in ((10, 0.8), (20, 0.6))}  # fmt: skip
    finished_run(directory, sweep.run(sweep.cells[0], 1), 10, sites)  # best: 10
    out = tmp_path / "report"
    out.mkdir()
    markdown = write_diagnostics(collect(directory), out).splitlines()
    heading, dot_row = row(markdown, "cell"), row(markdown, "dot")
    assert dot_row[heading.index("entropy_norm")] == "0.6"  # not the best step's 0.8


def test_the_chart_draws_the_temperature_of_the_types_that_have_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep, directory = sweep_of(tmp_path, ["dot", "cosine"])
    dot, cosine = sweep.cells
    for cell, scales in ((dot, {}), (cosine, {"temperature": 10.0})):
        sites = {step: {"decoder.attention": site("target", "source", 0.5, **scales)}
                 for step in (10, 20)}  # fmt: skip
        finished_run(directory, sweep.run(cell, 1), 20, sites)
    drawn = {}
    monkeypatch.setattr(diagnostics, "band_panels_figure", lambda panels, _: drawn.update(panels))
    monkeypatch.setattr(diagnostics, "figure_png", lambda _: b"png")
    write_diagnostics(collect(directory), tmp_path)
    assert list(drawn) == list(CURVES.values())
    assert set(drawn[CURVES["sink_mass"]]) == {"dot", "cosine"}
    assert drawn[CURVES["temperature"]] == {"cosine": ([10, 20], [10.0, 10.0], [0.0, 0.0])}
    shutil.rmtree(directory.run(sweep.run(cosine, 1)).root)
    drawn.clear()
    write_diagnostics(collect(directory), tmp_path)
    assert list(drawn) == [CURVES[name] for name in ("entropy_norm", "energy_std", "sink_mass")]


def test_every_run_is_a_line_of_its_validations_with_its_largest_sink_mass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep, directory = sweep_of(tmp_path, ["dot", "cosine"])
    dot, cosine = sweep.cells
    for seed in (1, 2):
        sites = {step: {"decoder.attention": site("target", "source", step / 100 + seed)}
                 for step in (10, 20)}  # fmt: skip
        finished_run(directory, sweep.run(dot, seed), 20, sites)
    layers = {  # entropy: the mean of the cross-attention modules; sink: the largest
        "decoder_layers.0.cross_attention": site("target", "source", 0.25, sink_mass=0.8),
        "decoder_layers.1.cross_attention": site("target", "source", 0.5, sink_mass=0.1),
        "decoder_layers.1.self_attention": site("target", "target", 0.9, sink_mass=0.9),
    }
    finished_run(directory, sweep.run(cosine, 1), 10, {10: layers})
    initial = directory.run(sweep.run(cosine, 1)).initial_attention  # update 0: not drawn
    initial.write_text(json.dumps({"decoder.attention": site("target", "source", 0.99)}))
    drawn = {}
    monkeypatch.setattr(
        diagnostics, "line_grid_figure", lambda rows, _, marks: drawn.update(rows, marks=marks)
    )
    monkeypatch.setattr(diagnostics, "figure_png", lambda _: b"png")
    write_diagnostics(collect(directory), tmp_path)
    entropy, sink = RUN_CURVES
    assert drawn.pop("marks") == {sink: LOCKED}
    assert drawn == {
        "dot": {
            entropy: {"seed 1": ([10, 20], [1.1, 1.2]), "seed 2": ([10, 20], [2.1, 2.2])},
            sink: {"seed 1": ([10, 20], [0.1, 0.1]), "seed 2": ([10, 20], [0.1, 0.1])},
        },
        "cosine": {entropy: {"seed 1": ([10], [0.375])}, sink: {"seed 1": ([10], [0.8])}},
    }


def test_no_measured_attention_writes_no_section(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep, directory = sweep_of(tmp_path, ["dot"])
    finished_run(directory, sweep.run(sweep.cells[0], 1), 10, {10: {}})
    results = collect(directory)
    assert [len(cell.runs) for cell in results.cells] == [1]  # finished, but measured nothing
    assert write_diagnostics(results, tmp_path) == ""
    assert not (tmp_path / CHART).exists()


def test_the_report_lists_the_runs_locked_onto_the_source_eos_and_when(
    tmp_path, monkeypatch, undrawn_charts
):
    monkeypatch.chdir(tmp_path)
    sweep, directory = sweep_of(tmp_path, ["dot", "cosine"])
    dot, cosine = sweep.cells
    sinks = {
        (dot, 1): [0.6, 0.7, 0.2, 0.55],  # locked, freed, locked again
        (dot, 2): [0.1, 0.2, 0.3, 0.49],  # never quite
        (cosine, 1): [0.1] * 4,
    }
    for (cell, seed), masses in sinks.items():
        sites = {
            10 * (i + 1): {"decoder.attention": site("target", "source", 0.5, sink_mass=mass)}
            for i, mass in enumerate(masses)
        }
        finished_run(directory, sweep.run(cell, seed), 40, sites)
    layers = {  # one decoder layer locked, the other not (their mean, 0.45, would not be)
        "decoder_layers.0.cross_attention": site("target", "source", 0.5, sink_mass=0.8),
        "decoder_layers.1.cross_attention": site("target", "source", 0.5, sink_mass=0.1),
        "decoder_layers.1.self_attention": site("target", "target", 0.5, sink_mass=0.9),
    }
    finished_run(directory, sweep.run(cosine, 2), 10, {10: layers})
    out = tmp_path / "report"
    out.mkdir()
    markdown = write_diagnostics(collect(directory), out).splitlines()
    assert "## Attention locked onto the source's end of sentence" in markdown
    dot_row = row(markdown[markdown.index("| cell | locked runs | when |") :], "dot")
    assert dot_row == ["dot", "1 of 2", "seed 1: 10-20, 40 (3 of 4 validations; largest 0.70)"]
    cosine_row = row(markdown[markdown.index("| cell | locked runs | when |") :], "cosine")
    assert cosine_row == ["cosine", "1 of 2", "seed 2: 10 (1 of 1 validations; largest 0.80)"]


def test_no_locked_run_is_one_sentence_naming_the_largest_sink_mass(
    tmp_path, monkeypatch, undrawn_charts
):
    monkeypatch.chdir(tmp_path)
    sweep, directory = sweep_of(tmp_path, ["dot"])
    for seed, mass in ((1, 0.3), (2, 0.45)):
        sites = {10: {"decoder.attention": site("target", "source", 0.5, sink_mass=mass)}}
        finished_run(directory, sweep.run(sweep.cells[0], seed), 10, sites)
    markdown = write_diagnostics(collect(directory), tmp_path)
    assert "| cell | locked runs |" not in markdown
    assert "at a validation; the largest: 0.45 (dot, seed 2)." in markdown


def test_the_curves_start_at_the_initial_weights_where_they_were_measured(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep, directory = sweep_of(tmp_path, ["dot"])
    run = sweep.run(sweep.cells[0], 1)
    sites = {step: {"decoder.attention": site("target", "source", 0.4)} for step in (10, 20)}
    finished_run(directory, run, 20, sites)
    at_start = {"decoder.attention": site("target", "source", 0.9, sink_mass=0.8)}
    directory.run(run).initial_attention.write_text(json.dumps(at_start))
    drawn = {}
    monkeypatch.setattr(diagnostics, "band_panels_figure", lambda panels, _: drawn.update(panels))
    monkeypatch.setattr(diagnostics, "figure_png", lambda _: b"png")
    markdown = write_diagnostics(collect(directory), tmp_path)
    assert drawn[CURVES["entropy_norm"]]["dot"][:2] == ([0, 10, 20], [0.9, 0.4, 0.4])
    assert "No cross-attention module of any run put 0.5" in markdown  # init: no validation
    lines = markdown.splitlines()
    at_start = lines[lines.index("## Attention diagnostics at the initial weights") :]
    assert row(at_start, "dot")[row(at_start, "cell").index("entropy_norm")] == "0.9"


def test_initial_sites_are_measured_once_and_kept_for_runs_without_checkpoints(
    toy, trained, tmp_path
):
    run = RunDir(tmp_path / "run")
    shutil.copytree(trained, run.root, ignore=shutil.ignore_patterns("tensorboard"))
    cfg = run.load_config()
    measured = initial_sites(run, cfg)
    valid = read_corpus(cfg.data.valid, cfg.data.src, cfg.data.tgt)
    initial = Translator.load(run.root, "init", device="cpu")  # where initial_sites measures
    expected = initial.attention_diagnostics(valid.src, valid.tgt)
    assert measured == expected["sites"] and run.initial_attention.is_file()
    shutil.rmtree(run.checkpoints)  # as a study's committed run directory
    assert initial_sites(run, cfg) == measured
    run.initial_attention.unlink()
    assert initial_sites(run, cfg) is None  # nothing to measure it from: no point at 0


DAMAGED = ['{"decoder.attention": {"quer', "[]", "null", '{"decoder.attention": 1}', '"text"']
HEATMAP = {"sentence": "a b", "translation": "x", "source": ["a", "b"], "target": ["x"],
           "weights": [[0.5, 0.5]]}  # fmt: skip


@pytest.mark.parametrize("kept", ["initial_attention", "best_attention"])
@pytest.mark.parametrize("content", [*DAMAGED, '{"weights": [[1]], "source": [], "target": []}'])
def test_a_damaged_kept_attention_file_lists_the_run_as_damaged(
    tmp_path, monkeypatch, kept, content
):
    monkeypatch.chdir(tmp_path)
    sweep, directory = sweep_of(tmp_path, ["dot", "general"])
    for cell in sweep.cells:
        finished_run(
            directory,
            sweep.run(cell, 1),
            10,
            {10: {"decoder.attention": site("target", "source", 0.4)}},
        )
    broken = directory.run(sweep.run(sweep.cells[0], 1))
    getattr(broken, kept).write_text(content)
    whole = directory.run(sweep.run(sweep.cells[1], 1))
    whole.initial_attention.write_text(
        json.dumps({"decoder.attention": site("target", "source", 0.9)})
    )
    whole.best_attention.write_text(json.dumps(HEATMAP))
    results = collect(directory)
    assert [(run.name, problem) for run, problem in results.damaged] == [
        (sweep.run(sweep.cells[0], 1).name, f"{getattr(broken, kept)} is damaged and "
         f"{'last' if kept == 'initial_attention' else 'best'}.pt, which it is measured from, "
         "is gone; restore the file, or train the run again")
    ]  # fmt: skip
    assert [c.cell.title for c in results.cells] == ["general"]  # the whole run is reported


@pytest.mark.parametrize(
    ("weights", "whole"),
    [
        ([[0.5, 0.5]], True),  # target x source
        ([[[0.5, 0.5], [1.0, 0.0]]], True),  # target x head x source: a Transformer's
        ([[[0.5, 0.5], [1.0, 0.0]], [[0.5, 0.5]]], False),  # heads differ by target
        ([[[0.5, 0.5, 0.0]]], False),  # a head as wide as no source
        ([[[0.5, "0.5"]]], False),
    ],
)
def test_a_kept_heatmap_is_whole_by_target_and_source_with_or_without_heads(
    tmp_path, weights, whole
):
    run = RunDir(tmp_path / "run")  # no checkpoints, as a study's committed run directory
    run.root.mkdir()
    run.best_attention.write_text(json.dumps(HEATMAP | {"weights": weights}))
    if whole:
        check_kept_attention(run)
    else:
        with pytest.raises(ValueError, match="best-attention.json is damaged"):
            check_kept_attention(run)


def test_a_damaged_kept_attention_file_is_measured_again_from_the_checkpoint(trained, tmp_path):
    run = RunDir(tmp_path / "run")
    shutil.copytree(trained, run.root, ignore=shutil.ignore_patterns("tensorboard"))
    measured = initial_sites(run, run.load_config())
    run.initial_attention.write_text(DAMAGED[0])
    check_kept_attention(run)  # the last checkpoint is there: removed, to measure again
    assert not run.initial_attention.exists()
    assert initial_sites(run, run.load_config()) == measured
