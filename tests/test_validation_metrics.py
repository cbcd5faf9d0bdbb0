"""Validation follows the metrics table (`metrics.METRICS`): a metric added to it is scored
at every validation, logged, drawn in TensorBoard, kept in the checkpoint and summary.json,
and selectable as `train.metric`; runs and summaries written before stay readable. (An
unknown `train.metric` is a row of test_bad_input.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from cli_helpers import train
from sacrebleu.metrics import CHRF
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from seq2seq.attention.diagnostics import LOCKED, locked_sites
from seq2seq.config import validation_metrics
from seq2seq.metrics import Metric
from seq2seq.sweep.directory import Summary
from seq2seq.train import validation
from seq2seq.train.validation import higher_is_better

RESULTS = Path(__file__).resolve().parent.parent / "docs/results"


def chrf_pp() -> CHRF:
    return CHRF(word_order=2)


def checkpoint(run: Path) -> dict:
    return torch.load(run / "checkpoints/last.pt", weights_only=True)


def test_a_metric_added_to_the_table_is_validated_everywhere(toy, tmp_path, add_metric):
    add_metric(Metric("chrfpp", "chrF++", chrf_pp, True, "chrfpp_signature"))
    assert validation_metrics() == ["bleu", "chrf", "ter", "chrfpp", "loss"]
    run = tmp_path / "run"
    assert train(toy, run, "train.max_steps=4", "train.metric=chrfpp", "data.test=[]") == 0
    log = (run / "train.log").read_text()
    assert "validation at step 4: BLEU " in log and "  chrF++ " in log
    records = checkpoint(run)["progress"]["validations"]
    assert [list(r) for r in records] == [["step", "bleu", "chrf", "ter", "chrfpp", "loss"]] * 2
    summary = json.loads((run / "summary.json").read_text())
    assert [{k: v for k, v in r.items() if k != "attention"} for r in summary["validations"]] == (
        records
    )
    # The best checkpoints are chosen by chrF++, the higher the better (the table says).
    best = checkpoint(run)["progress"]["best"]
    assert {step: score for score, step in best} == {r["step"]: r["chrfpp"] for r in records}
    assert [score for score, _ in best] == sorted((score for score, _ in best), reverse=True)
    assert summary["best_chrfpp"] == best[0][0]
    events = EventAccumulator(str(run / "tensorboard")).Reload()
    drawn = [e.value for e in events.Scalars("valid/chrfpp")]  # float32
    assert drawn == pytest.approx([r["chrfpp"] for r in records])
    hparams = events.PluginTagToContent("hparams")["_hparams_/experiment"]
    assert b"valid/chrfpp" in hparams and b"valid/ter" in hparams


def test_the_direction_of_each_metric_comes_from_the_table():
    assert [higher_is_better(name) for name in validation_metrics()] == [True, True, False, False]


def test_a_run_whose_checkpoint_holds_tuples_resumes_and_continues_its_curve(
    toy, six_steps, tmp_path
):
    """Checkpoints written before validations were records hold (step, BLEU, chrF, loss)."""
    run = tmp_path / "old"
    shutil.copytree(six_steps, run)
    state = checkpoint(run)
    records = state["progress"]["validations"]
    state["progress"]["validations"] = [
        (r["step"], r["bleu"], r["chrf"], r["loss"]) for r in records
    ]
    torch.save(state, run / "checkpoints/last.pt")
    assert train(toy, run, "train.max_steps=8") == 0
    resumed = checkpoint(run)["progress"]["validations"]
    old = [{k: r[k] for k in ("step", "bleu", "chrf", "loss")} for r in records]
    assert resumed[:3] == old and [r["step"] for r in resumed] == [2, 4, 6, 8]
    assert list(resumed[3]) == ["step", "bleu", "chrf", "ter", "loss"]
    summary = json.loads((run / "summary.json").read_text())
    assert [r["step"] for r in summary["validations"]] == [2, 4, 6, 8]
    assert "ter" not in summary["validations"][0] and "ter" in summary["validations"][3]
    assert [r.scores for r in Summary.model_validate(summary).validations] == [
        {k: v for k, v in r.items() if k not in ("step", "loss")} for r in resumed
    ]


def test_summaries_written_before_ter_was_validated_are_read_as_they_are():
    """The committed studies' summary.json files hold BLEU, chrF and the loss."""
    path = next(RESULTS.glob("attention-rnn/runs/*/summary.json"))
    written = json.loads(path.read_text())
    summary = Summary.model_validate(written)
    first = written["validations"][0]
    assert summary.validations[0].scores == {"bleu": first["bleu"], "chrf": first["chrf"]}
    assert summary.validations[0].loss == first["loss"]
    del written["validations"][1]["bleu"]
    with pytest.raises(ValueError, match="the validation at step .* has no bleu"):
        Summary.model_validate(written)


@pytest.mark.parametrize(
    "decoding",
    [
        ["decode.beam=4", "decode.mbr=4", "decode.mbr_utility=bleu"],
        ["decode.beam=4", "decode.beam_groups=2", "decode.group_diversity=1"],
        ["decode.beam=1", "decode.sample=true", "decode.temperature=2"],
    ],
    ids=["mbr", "groups", "sampling"],
)
def test_validation_searches_greedily_whatever_the_run_tests_with(toy, tmp_path, decoding):
    """A run that tests with MBR, diverse groups or samples validates by greedy search: the
    same translations as a run with the default decoding (the same weights)."""
    settings = ["train.max_steps=2", "train.valid_every=2", "data.test=[]"]
    for name, extra in (("plain", []), ("run", decoding)):
        assert train(toy, tmp_path / name, *settings, *extra) == 0
    hypotheses = [(tmp_path / name / "valid/step-2.hyp").read_text() for name in ("plain", "run")]
    assert hypotheses[0] == hypotheses[1]


def test_a_validation_whose_attention_locked_onto_the_source_eos_says_so(
    toy, tmp_path, monkeypatch
):
    """A cross-attention site whose sink mass reaches LOCKED is named in a warning of the
    validation's; below it, nothing is said."""
    masses = iter([0.8, 0.2])

    def sites(model, batches):
        entry = {"queries": "target", "keys": "source", "mean": {"sink_mass": next(masses)}}
        return {"decoder.attention": entry}

    monkeypatch.setattr(validation, "measure_attention", sites)
    run = tmp_path / "run"
    settings = ("train.max_steps=4", "train.valid_every=2", "train.attention_diagnostics=true")
    assert train(toy, run, *settings, "data.test=[]") == 0
    warnings = [line for line in (run / "train.log").read_text().splitlines() if "locked" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0]
    assert "locked onto the source's end of sentence at step 2 (sink mass: " in warnings[0]
    assert "decoder.attention 0.80)" in warnings[0]
    assert locked_sites({"a": {"mean": {"sink_mass": LOCKED}}, "b": {"mean": {}}}) == {"a": 0.5}
