"""`seq2seq inspect` and `Translator.attention_diagnostics`: a trained model's attention."""

import json
import re
import shutil

import pytest
import torch
import yaml
from cli_helpers import run_cli

from seq2seq import Translator
from seq2seq.attention.diagnostics import DIAGNOSTICS
from seq2seq.checkpoint import RunDir
from seq2seq.data.corpus import read_lines
from seq2seq.decode.inspection import diagnostics_table
from seq2seq.decode.loading import load_trained_model
from seq2seq.errors import UserError
from seq2seq.train.distributed import World
from seq2seq.train.run import build_trainer


def test_inspect_prints_a_table_and_the_same_json_as_the_python_api(toy, trained, tmp_path, capsys):
    data = toy / "data"
    sources, references = read_lines(data / "test.src"), read_lines(data / "test.tgt")
    src, ref = tmp_path / "src", tmp_path / "ref"
    src.write_text("\n".join([*sources, "  "]) + "\n")  # a last pair with a blank source
    ref.write_text("\n".join([*references, "x"]) + "\n")
    assert run_cli("inspect", "--run", trained, "--src", src, "--ref", ref, "--json") == 0
    found = json.loads(capsys.readouterr().out)
    assert found["pairs"] == len(sources) and found["skipped"] == [len(sources) + 1]
    entry = found["sites"]["decoder.attention"]
    # Exact zeros: sparse normalizers only; a learning signal: REINFORCE only.
    softmax = set(DIAGNOSTICS) - {"support", "zeros", "reinforce_var"}
    assert entry["mean"].keys() >= softmax and entry["mean"]["v_norm"] > 0  # bahdanau
    api = Translator.load(trained).attention_diagnostics(sources, references)
    assert api["sites"] == found["sites"]

    assert run_cli("inspect", "--run", trained, "--src", src, "--ref", ref) == 0
    table = capsys.readouterr().out.splitlines()
    assert "best.pt: 10 sentence pairs, 1 with a blank side skipped" in table[0]
    assert table[2].split()[:3] == ["site", "H", "nats"]
    assert table[3].startswith("decoder.attention") and len(table[3].split()) == 1 + len(
        DIAGNOSTICS
    )
    assert table[-1].startswith("decoder.attention: v_norm ")


def test_the_table_keeps_cells_apart_where_a_number_fills_its_width():
    values = dict.fromkeys(DIAGNOSTICS, 0.2594) | {"saturated": 8.049e-05, "entropy": -1.5e-05}
    site = {"heads": 1, "mean": values}
    lines = diagnostics_table({"decoder.attention": site}).splitlines()
    assert len(lines[1].split()) == 1 + len(DIAGNOSTICS)
    assert "8.049e-05" in lines[1].split() and "-1.5e-05" in lines[1].split()


def test_inspect_refuses_files_that_are_not_pairs_in_one_line(toy, trained, tmp_path, capsys):
    src, ref = tmp_path / "src", tmp_path / "ref"
    src.write_text("a b\nc d\n")
    ref.write_text("a b\n")
    assert run_cli("inspect", "--run", trained, "--src", src, "--ref", ref) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "2 source lines but 1 reference lines" in error
    ref.write_text("\n\n")
    assert run_cli("inspect", "--run", trained, "--src", src, "--ref", ref) == 2
    assert "every pair has a blank side" in capsys.readouterr().err


def test_init_is_the_model_that_training_started_from(six_steps, tmp_path):
    run = RunDir(six_steps)
    fresh = RunDir(tmp_path / "fresh")  # the same config, set up again but not trained
    shutil.copytree(run.tokenizer, fresh.tokenizer)
    started = build_trainer(run.load_config(), fresh, World()).model.state_dict()
    torch.manual_seed(7)  # whatever the caller drew before, init is the run's seed's draw
    origin, _, initial = load_trained_model(run, "init")
    assert origin.checkpoint is None and origin.step == 0 and origin.checkpoint_name == "init"
    assert initial.state_dict().keys() == started.keys()
    # The trainer's model is on the run's device (a GPU where `auto` finds one), a loaded
    # one on the CPU, as load_trained_model says.
    for name, weights in initial.state_dict().items():
        assert weights.device.type == "cpu" and torch.equal(weights, started[name].cpu()), name
    assert initial.length_ratio.item() != 1.0  # the corpus's, not the default
    last = load_trained_model(run, "last")[2].state_dict()
    assert any(not torch.equal(w, last[name]) for name, w in initial.state_dict().items())


def test_inspect_init_measures_the_weights_before_training(toy, trained, capsys):
    data = toy / "data"
    pairs = ("--src", data / "test.src", "--ref", data / "test.tgt")
    assert run_cli("inspect", "--run", trained, *pairs, "--checkpoint", "init", "--json") == 0
    at_start = json.loads(capsys.readouterr().out)["sites"]
    sources, references = read_lines(data / "test.src"), read_lines(data / "test.tgt")
    api = Translator.load(trained, "init").attention_diagnostics(sources, references)
    assert api["sites"] == at_start
    trained_sites = Translator.load(trained).attention_diagnostics(sources, references)["sites"]
    assert at_start["decoder.attention"]["mean"] != trained_sites["decoder.attention"]["mean"]
    assert run_cli("inspect", "--run", trained, *pairs, "--checkpoint", "init") == 0
    assert "its initial weights (seed 1): 10 sentence pairs" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["inspect", "translate"])
def test_init_of_a_fine_tuned_run_is_refused_naming_its_parent(
    toy, trained, tmp_path, capsys, command
):
    child = tmp_path / "child"
    shutil.copytree(trained, child, ignore=shutil.ignore_patterns("tensorboard"))
    config = yaml.safe_load((child / "config.yaml").read_text())
    config["train"]["init_from"] = str(trained)
    (child / "config.yaml").write_text(yaml.safe_dump(config))
    data = toy / "data"
    args = ["--src", data / "test.src", "--ref", data / "test.tgt"]
    if command == "translate":
        args = ["--input", data / "test.src"]
    assert run_cli(command, "--run", child, *args, "--checkpoint", "init") == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"weights of train.init_from ({trained})" in error


def test_init_of_a_run_without_checkpoints_says_what_it_needs(toy, trained, tmp_path, capsys):
    untrained = tmp_path / "untrained"
    untrained.mkdir()
    shutil.copy(trained / "config.yaml", untrained / "config.yaml")
    shutil.copytree(trained / "tokenizer", untrained / "tokenizer")
    data = toy / "data"
    args = ["--src", data / "test.src", "--ref", data / "test.tgt", "--checkpoint", "init"]
    assert run_cli("inspect", "--run", untrained, *args) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "length ratio from one of the run's checkpoints" in error


def test_a_checkpoint_with_a_non_finite_weight_is_refused_in_one_line(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    state = torch.load(run / "checkpoints/best.pt", weights_only=True)
    name = next(k for k, w in state["model"].items() if w.is_floating_point() and w.dim() == 2)
    state["model"][name].view(-1)[3] = float("nan")
    torch.save(state, run / "checkpoints/best.pt")
    with pytest.raises(UserError, match=rf"best.pt has non-finite weights \({re.escape(name)}\)"):
        Translator.load(run)
    source = tmp_path / "src.txt"
    source.write_text("mimi toto\n")
    capsys.readouterr()
    for command in (("translate", "-i", source), ("evaluate", "--src", source, "--ref", source)):
        assert run_cli(command[0], "--run", run, *command[1:]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "non-finite weights" in err and "Traceback" not in err


def test_inspect_json_writes_non_finite_diagnostics_as_null(trained, tmp_path, capsys, monkeypatch):
    source = tmp_path / "src.txt"
    source.write_text("mimi toto\n")
    found = {
        "sites": {"decoder.attention": {"mean": {"energy_std": float("inf")}}},
        "x": [float("nan")],
    }
    monkeypatch.setattr(Translator, "attention_diagnostics", lambda self, s, r: found)
    capsys.readouterr()
    assert run_cli("inspect", "--run", trained, "--src", source, "--ref", source, "--json") == 0

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    printed = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert printed == {"sites": {"decoder.attention": {"mean": {"energy_std": None}}}, "x": [None]}


def test_init_needs_only_one_checkpoint_for_the_length_ratio(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    expected = load_trained_model(RunDir(trained), "init")[2].state_dict()
    for name in ("last", "previous"):
        (run / f"checkpoints/{name}.pt").unlink(missing_ok=True)
    initial = load_trained_model(RunDir(run), "init")[2].state_dict()  # from best.pt's ratio
    assert all(torch.equal(initial[k], expected[k]) for k in expected)
    for path in (run / "checkpoints").glob("*.pt"):
        path.unlink()
    with pytest.raises(UserError, match=r"one of the run's checkpoints \(last, previous or best\)"):
        load_trained_model(RunDir(run), "init")
