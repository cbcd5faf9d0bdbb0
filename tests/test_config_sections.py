"""Every section of the config schema has one set of defaults, whether it is absent, empty
or partly written; a config loads in any import order; the attention sections an
architecture reads are named in one place, and the training log names them."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_helpers import train

from seq2seq.config import AttentionConfig, Config, config_differences, load_config
from seq2seq.config.reference import walk

ROOT = Path(__file__).resolve().parent.parent
DATA = {"src": "de", "tgt": "en", "train": "corpus/train", "valid": "corpus/val"}
BASE = {"data": DATA}  # the required fields; every other one takes its default
SECTIONS = [entry.path for entry in walk() if entry.section is not None]


def with_value(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of nested `data` with the dotted `path` set to `value`."""
    data = copy.deepcopy(data)
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return data


def lookup(data: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        data = data[part]
    return data


def test_the_schema_has_sections_and_subsections():
    assert {"data", "model", "model.attention", "model.self_attention"} <= set(SECTIONS)
    assert "train.optimizer" in SECTIONS


@pytest.mark.parametrize("section", SECTIONS)
def test_a_section_has_the_same_defaults_absent_empty_or_partly_written(section):
    """Writing `section: {}` (its required fields aside), or any one of its fields at the
    value it has when the section is absent, changes nothing else."""
    absent = Config.model_validate(BASE)
    written = absent.to_dict()
    given = lookup(BASE, section) if section == "data" else {}  # data has required fields
    variants = {f"{section}: {given}": with_value(BASE, section, given)}
    for name in lookup(written, section):
        variants[f"{section}.{name} written"] = with_value(
            BASE, section, {**given, name: lookup(written, section)[name]}
        )
    for variant, data in variants.items():
        differ = config_differences(absent, Config.model_validate(data))
        assert not differ, f"{variant}: {differ}"


def transformer_yaml(tmp_path: Path, model: dict[str, Any]) -> Path:
    path = tmp_path / "run.yaml"
    model = {"arch": "transformer", "embed_dim": 16, "hidden_dim": 16} | model
    path.write_text(yaml.safe_dump({"data": DATA, "model": model}))
    return path


@pytest.mark.parametrize("section", [{}, {"heads": 2}, {"window": 10}])
def test_a_partial_self_attention_section_in_yaml_stays_scaled_dot(tmp_path, section):
    model = load_config(transformer_yaml(tmp_path, {"self_attention": section})).model
    assert model.self_attention.type == "scaled-dot"
    assert model.self_attention.heads == section.get("heads")
    assert model.attention.type == "bahdanau"


def test_a_self_attention_override_stays_scaled_dot(tmp_path):
    path = transformer_yaml(tmp_path, {})
    model = load_config(path, ["model.self_attention.heads=2"]).model
    assert (model.self_attention.type, model.heads(model.self_attention)) == ("scaled-dot", 2)


def test_the_attention_sections_of_each_architecture():
    rnn = Config.model_validate(BASE).model
    assert list(rnn.attention_sections()) == ["attention"]
    transformer = rnn.model_copy(update={"arch": "transformer"})
    assert transformer.attention_sections() == {
        "attention": transformer.attention,
        "self_attention": transformer.self_attention,
    }
    assert transformer.describe_attention() == (
        "attention: bahdanau, 4 heads; self_attention: scaled-dot, 4 heads"
    )
    assert rnn.describe_attention() == "attention: bahdanau, 1 head"
    sparse = rnn.model_copy(update={"attention": AttentionConfig(normalizer="sparsemax")})
    assert sparse.describe_attention() == "attention: bahdanau, 1 head, sparsemax"


def test_a_config_loads_in_a_fresh_interpreter_in_any_import_order(tmp_path):
    """Nothing imports the attention package first: the schema fills its table itself."""
    path = transformer_yaml(tmp_path, {"attention": {"type": "general"}})
    code = (
        "import sys; from seq2seq.config import load_config; "
        "assert 'seq2seq.attention' not in sys.modules; "
        "model = load_config(sys.argv[1]).model; "
        "print(model.attention.type, model.self_attention.type)"
    )
    # Before, not instead of, a PYTHONPATH that holds the dependencies (a GPU machine's).
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["general", "scaled-dot"]


def test_the_training_log_names_both_attention_types(toy, tmp_path, capsys):
    run = tmp_path / "run"
    overrides = (
        "model.arch=transformer", "model.ff_dim=16", "model.attention.type=general",
        "model.self_attention.heads=2", "train.max_steps=1", "data.test=[]",
    )  # fmt: skip
    assert train(toy, run, *overrides) == 0
    line = "attention: general, 4 heads; self_attention: scaled-dot, 2 heads"
    assert line in (run / "train.log").read_text(encoding="utf-8")
    assert line in capsys.readouterr().err


def test_one_test_set_may_be_given_as_a_string(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"data": DATA | {"test": "corpus/test"}}))
    assert load_config(path).data.test == ["corpus/test"]
    assert load_config(path, ["data.test=corpus/other"]).data.test == ["corpus/other"]
    assert load_config(path, ["data.test=[a/x, b/y]"]).data.test == ["a/x", "b/y"]
