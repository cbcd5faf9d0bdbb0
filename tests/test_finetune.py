"""Fine-tuning (`train.init_from` / `--init-from`): a new run from another run's weights
and tokenizer, with a fresh optimizer, schedule and step count."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import torch
from cli_helpers import run_cli, train

from seq2seq.config import load_config
from seq2seq.errors import UserError
from seq2seq.models import build_model


def weights(run, name="last"):
    return torch.load(run / f"checkpoints/{name}.pt", weights_only=True)["model"]


@pytest.fixture
def parent(trained, tmp_path):
    """A copy of the trained toy run that a test may delete."""
    copy = tmp_path / "parent"
    shutil.copytree(trained, copy)
    return copy


def test_a_fine_tuned_run_starts_from_its_parent(toy, parent, tmp_path, capsys):
    child = tmp_path / "child"
    # A learning rate too small to move much (with a floor below it: min_lr <= lr).
    still = ("train.max_steps=3", "train.optimizer.lr=1e-9", "train.schedule.min_lr=0")
    still += ("model.dropout=0.0",)
    still += ("model.attention.dropout=0.1",)  # training-only, like model.dropout
    assert train(toy, child, *still, f"train.init_from={parent}") == 0
    before, after = weights(parent, "best"), weights(child)
    assert all(torch.allclose(before[k], after[k], atol=1e-4) for k in before)
    torch.manual_seed(1)  # the toy config's seed: what the child would start from alone
    config = load_config(toy / "run.yaml")
    fresh = build_model(config.model, 120, 120, pad_id=0).state_dict()
    assert not all(torch.allclose(before[k], fresh[k], atol=1e-4) for k in before)

    assert json.loads((child / "summary.json").read_text())["steps"] == 3  # a fresh count
    for name in ("joint.model", "tokenizer.json"):
        assert (child / "tokenizer" / name).read_bytes() == (
            parent / "tokenizer" / name
        ).read_bytes()
    meta = json.loads((child / "meta.json").read_text())
    best = (parent / "checkpoints/best.pt").read_bytes()
    assert meta["init_from"] == {
        "run": str(parent),
        "checkpoint": str(parent / "checkpoints/best.pt"),
        "sha256": hashlib.sha256(best).hexdigest(),
    }
    assert "fine-tuning from" in (child / "train.log").read_text()


def test_resuming_a_fine_tuned_run_resumes_it_not_its_parent(toy, parent, tmp_path):
    child, checkpoint = tmp_path / "child", parent / "checkpoints/last.pt"
    assert run_cli(
        "train", "--config", toy / "run.yaml", "--run-dir", child, "--init-from", checkpoint,
        "--set", "train.max_steps=2",
    ) == 0  # fmt: skip
    shutil.rmtree(parent)  # the parent is not needed any more
    assert train(toy, child, "train.max_steps=4", f"train.init_from={checkpoint}") == 0
    log = (child / "train.log").read_text()
    assert log.count("fine-tuning from") == 1 and "from step 2" in log
    assert json.loads((child / "meta.json").read_text())["init_from"]["checkpoint"] == str(
        checkpoint
    )
    assert json.loads((child / "summary.json").read_text())["steps"] == 4


@pytest.mark.parametrize(
    "change, fragments",
    [
        ("model.hidden_dim=32", ["model.hidden_dim: 16 -> 32", "extends: "]),
        ("tokenizer.vocab_size=100", ["tokenizer.vocab_size: 120 -> 100"]),
    ],
)
def test_a_child_of_another_shape_is_refused(toy, parent, tmp_path, capsys, change, fragments):
    child = tmp_path / "child"
    assert train(toy, child, change, f"train.init_from={parent}") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(f in err for f in fragments), err
    assert not child.exists()


def test_a_missing_or_bare_parent_is_refused(toy, tmp_path, capsys):
    (tmp_path / "bare").mkdir()
    for where, fragment in [
        (tmp_path / "nowhere", "no such run directory or checkpoint file"),
        (tmp_path / "bare", "is not a run directory"),
    ]:
        assert train(toy, tmp_path / "child", f"train.init_from={where}") == 2
        assert fragment in capsys.readouterr().err
    assert not (tmp_path / "child").exists()


def test_select_pairs_writes_the_matching_pairs(load_script, tmp_path):
    select = load_script("select_pairs").select_pairs
    (tmp_path / "c.de").write_text("ein Hund\neine Katze\nzwei Hunde\n")
    (tmp_path / "c.en").write_text("a dog\na cat\ntwo dogs\n")
    assert select(str(tmp_path / "c"), "de", "en", "[Hh]und", tmp_path / "out") == 2
    assert (tmp_path / "out.de").read_text() == "ein Hund\nzwei Hunde\n"
    assert (tmp_path / "out.en").read_text() == "a dog\ntwo dogs\n"
    assert select(str(tmp_path / "c"), "de", "en", "[Hh]und", tmp_path / "rest", invert=True) == 1
    assert (tmp_path / "rest.en").read_text() == "a cat\n"
    for pattern, fragment in [("(", "not a regular expression"), ("Maus", "no source line")]:
        with pytest.raises(UserError, match=fragment):
            select(str(tmp_path / "c"), "de", "en", pattern, tmp_path / "none")
    assert not list(tmp_path.glob("none*"))
