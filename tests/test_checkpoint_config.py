"""A checkpoint records its model config, and one whose config differs from the run's in
anything the weights compute is refused with one line naming the fields, even where every
tensor shape matches (`bahdanau` and `concat` share their parameters)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml
from cli_helpers import run_cli

from seq2seq.checkpoint import load_model_weights
from seq2seq.config import ModelConfig
from seq2seq.models import build_model

FIX = "use the run's own config.yaml or a checkpoint of this run"


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the trained toy run (RNN, bahdanau attention), to edit."""
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def edit_config(run: Path, **model) -> None:
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["model"] |= model
    (run / "config.yaml").write_text(yaml.safe_dump(config))


def rewrite_checkpoint(run: Path, name: str, change) -> Path:
    """best.pt with `change` applied to its state, saved as checkpoints/NAME.pt."""
    state = torch.load(run / "checkpoints/best.pt", weights_only=True)
    change(state)
    path = run / f"checkpoints/{name}.pt"
    torch.save(state, path)
    return path


def translate(run: Path, toy: Path, tmp_path: Path, *args) -> int:
    output = tmp_path / "out.txt"
    source = toy / "data/test.src"
    return run_cli("translate", "--run", run, "-i", source, "-o", output, "--beam", "1", *args)


def test_a_config_edited_after_training_is_refused(run, toy, tmp_path, capsys):
    edit_config(run, attention={"type": "concat"})
    assert translate(run, toy, tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    field = "model.attention.type: checkpoint 'bahdanau', config 'concat'"
    assert f"does not fit this model: {field}; {FIX}" in err


def test_another_types_checkpoint_is_refused(run, toy, tmp_path, capsys):
    def from_a_concat_run(state):
        state["model_config"]["attention"]["type"] = "concat"

    other = rewrite_checkpoint(run, "other", from_a_concat_run)
    assert translate(run, toy, tmp_path, "--checkpoint", other) == 2
    assert "model.attention.type: checkpoint 'concat', config 'bahdanau'" in capsys.readouterr().err


def test_dropout_and_checkpoints_without_a_recorded_config_still_load(run, toy, tmp_path):
    edit_config(run, dropout=0.0)  # training only: the weights compute the same
    old = rewrite_checkpoint(run, "old", lambda state: state.pop("model_config"))
    assert translate(run, toy, tmp_path, "--checkpoint", old) == 0
    assert translate(run, toy, tmp_path) == 0


def test_fields_the_schema_gained_or_lost_since_the_checkpoint_do_not_refuse_it():
    cfg = ModelConfig(embed_dim=8, hidden_dim=8)
    model = build_model(cfg, 12, 12, 0)
    recorded = cfg.model_dump(mode="json")
    del recorded["norm"]  # added later: counts at its default
    recorded["retired_field"] = 1  # removed since: read by nothing
    state = {"model": model.state_dict(), "model_config": recorded}
    load_model_weights(build_model(cfg, 12, 12, 0), state, cfg, Path("x.pt"))
