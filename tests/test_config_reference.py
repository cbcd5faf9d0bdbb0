"""The configuration reference is read off the schema: docs/configuration.md is current,
every field is described, and `seq2seq config` prints YAML that reads back as the config."""

from __future__ import annotations

from pathlib import Path

import yaml
from cli_helpers import run_cli

from seq2seq.config import Config, load_config
from seq2seq.config.reference import REQUIRED, commented_yaml, markdown, walk

ROOT = Path(__file__).resolve().parent.parent
DATA = {"src": "de", "tgt": "en", "train": "corpus/train", "valid": "corpus/val"}


def test_docs_configuration_is_generated_from_the_current_schema():
    written = (ROOT / "docs/configuration.md").read_text(encoding="utf-8")
    assert written == markdown(), (
        "docs/configuration.md is out of date: seq2seq config --markdown > docs/configuration.md"
    )


def test_every_field_is_described_and_named_in_the_reference():
    entries = walk()
    assert len([e for e in entries if e.section is None]) > 60
    undescribed = [e.path for e in entries if not e.description.strip()]
    assert not undescribed, f"give these fields a description in the schema: {undescribed}"
    reference = markdown()
    assert all(f"| `{e.path}` |" in reference for e in entries if e.section is None)


def test_section_defaults_are_the_sections_own():
    defaults = {e.path: e.default for e in walk()}
    assert defaults["model.attention.type"] == "bahdanau"
    assert defaults["model.self_attention.type"] == "scaled-dot"  # SelfAttentionConfig
    assert defaults["data.train"] is REQUIRED and defaults["train.optimizer.betas"] == (0.9, 0.999)


def test_the_commented_yaml_reads_back_as_the_same_config():
    config = load_config(ROOT / "configs/multi30k_transformer.yaml", ["train.max_steps=7"])
    text = commented_yaml(config.to_dict())
    assert "# the architecture; one of rnn, transformer" in text
    assert Config.model_validate(yaml.safe_load(text)) == config


def test_the_defaults_read_back_as_the_defaults_once_data_is_given():
    values = yaml.safe_load(commented_yaml())
    sampling = {"alpha": None, "nbest": -1, "segmentations": 8}
    assert values["data"] == {"src": None, "tgt": None, "train": None, "weights": None,
                              "temperature": None, "target_tags": None,
                              "tags": None, "alignments": False, "valid": None, "test": [],
                              "valid_alignments": False, "filters": [], "max_len": 100,
                              "max_len_ratio": None, "subword_sampling": sampling}  # fmt: skip
    values["data"] |= DATA
    assert Config.model_validate(values) == Config.model_validate({"data": DATA})


def test_the_config_command(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"data": DATA, "model": {"cell": "gru"}}))
    assert run_cli("config", "--config", config, "--set", "decode.beam=3") == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["decode"]["beam"] == 3 and printed["model"]["cell"] == "gru"
    assert printed["model"]["hidden_dim"] == 128  # a default, filled in
    assert run_cli("config", "--markdown") == 0
    assert capsys.readouterr().out == markdown()
    assert run_cli("config", "--set", "decode.beam=3") == 2
    assert "pass the config too" in capsys.readouterr().err
    assert run_cli("config", "--config", config, "--set", "decode.beam=0") == 2
    assert "decode.beam = 0" in capsys.readouterr().err
