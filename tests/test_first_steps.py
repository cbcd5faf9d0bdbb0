"""The README's first steps as a newcomer meets them: its Python example prints, its export
example names a demo that can be exported, `make test` says why tests were skipped, a bare
config trains the small model the README describes and logs its first update at once."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import yaml
from cli_helpers import train

from seq2seq.config import load_config
from seq2seq.data.tokenizer import PAD_ID
from seq2seq.decode.translate import Translator
from seq2seq.export import unexportable
from seq2seq.models import build_model, count_parameters

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def demo_configs() -> dict[str, Path]:
    """The demo configs by the run directory they train (runs/NAME)."""
    configs = sorted((ROOT / "configs").glob("demo*.yaml"))
    return {yaml.safe_load(path.read_text())["name"]: path for path in configs}


def test_the_python_example_prints_its_translation(trained):
    example = re.search(r"```python\n(from seq2seq import Translator\n.*?)```", README, re.S)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(example.group(1).replace('"runs/demo"', repr(str(trained))), {})
    expected = Translator.load(trained).translate(["labe mimi toto"], beam=5)
    assert printed.getvalue() == f"{expected}\n"


def test_the_export_example_exports_a_demo_that_can_be_exported():
    exported = re.findall(r"seq2seq export --run runs/(\S+)", README)
    configs = demo_configs()
    assert exported and all(name in configs for name in exported)
    for name in exported:
        assert unexportable(load_config(configs[name])) is None, name
    assert unexportable(load_config(configs["demo"])) is not None  # the README says so


def test_make_test_reports_why_tests_were_skipped():
    recipe = re.search(r"^test: .*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert re.search(r"pytest\b.*\s-\w*r\w*s", recipe.group(1))


def test_a_bare_config_trains_the_model_the_readme_describes(tmp_path):
    bare = tmp_path / "my.yaml"
    bare.write_text(
        yaml.safe_dump({"data": {"src": "de", "tgt": "en", "train": "t", "valid": "v"}})
    )
    cfg = load_config(bare)
    vocabulary = cfg.tokenizer.vocab_size
    millions = count_parameters(build_model(cfg.model, vocabulary, vocabulary, PAD_ID)) / 1e6
    described = re.search(r"([\d.]+)M parameters with the default\s+([\d,]+) pieces", README)
    assert float(described.group(1)) == round(millions, 1) and millions < 5
    assert int(described.group(2).replace(",", "")) == vocabulary


def test_the_first_update_is_logged_whatever_log_every_says(toy, tmp_path):
    run_dir = tmp_path / "run"
    assert train(toy, run_dir, "train.log_every=100", "train.max_steps=2", "data.test=[]") == 0
    steps = re.findall(r"INFO step (\d+) ", (run_dir / "train.log").read_text())
    assert steps == ["1"]
