"""The command line's conveniences: -h and --version, completion, `train CONFIG`, the
decoding options `translate` and `evaluate` share, and `evaluate --hyp`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from cli_helpers import run_cli

from seq2seq import __version__
from seq2seq.cli import app
from seq2seq.data.corpus import read_lines
from seq2seq.decode.translate import Translator

COMMANDS = [c.name or c.callback.__name__ for c in app.registered_commands]


def test_version(capsys):
    assert run_cli("--version") == 0
    assert capsys.readouterr().out.strip() == f"seq2seq {__version__}"


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS), ["sweep", "report"]])
def test_every_command_answers_h(command, capsys):
    assert run_cli(*command, "-h") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Usage: seq2seq {' '.join(command)}".rstrip())
    # Options name what they take (FIELD=VALUE, CHECKPOINT), not a Python type.
    assert not re.search(r"<(?:str|text|list\[[^]]*\])>", out), out


def test_shell_completion_completes_command_names():
    env = os.environ | {"_SEQ2SEQ_COMPLETE": "complete_bash", "COMP_WORDS": "seq2seq tr",
                        "COMP_CWORD": "1"}  # fmt: skip
    command = [sys.executable, "-c", "from seq2seq.cli import main; main()"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["train", "translate"]


def test_train_takes_the_config_as_an_argument_or_an_option(toy, tmp_path, capsys):
    args = ("--run-dir", tmp_path / "run", "--set", "train.max_steps=2", "--set", "data.test=[]")
    assert run_cli("train", toy / "run.yaml", *args) == 0
    assert run_cli("train", toy / "run.yaml", "--config", tmp_path / "other.yaml", *args) == 2
    assert "two configs given" in capsys.readouterr().err
    assert run_cli("train", *args) == 2
    assert "pass the run config: seq2seq train CONFIG" in capsys.readouterr().err


def test_translate_and_evaluate_share_the_decoding_options(trained, toy, tmp_path, capsys):
    source, reference = toy / "data/test.src", toy / "data/test.tgt"
    options = ("--beam", "2", "--length-penalty", "0", "--batch-tokens", "50",
               "--coverage-penalty", "0.5", "--device", "cpu", "--checkpoint", "last")  # fmt: skip
    output = tmp_path / "out.txt"
    assert run_cli("translate", "--run", trained, "-i", source, "-o", output, *options) == 0
    translator = Translator.load(trained, "last", "cpu", beam=2, length_penalty=0,
                                 coverage_penalty=0.5)  # fmt: skip
    assert read_lines(output) == translator.translate(read_lines(source))
    capsys.readouterr()
    assert run_cli("evaluate", "--run", trained, "--src", source, "--ref", reference,
                   *options, "--json") == 0  # fmt: skip
    by_model = json.loads(capsys.readouterr().out)
    assert run_cli("evaluate", "--hyp", output, "--ref", reference, "--json") == 0
    by_file = json.loads(capsys.readouterr().out)
    assert by_model == by_file and {"bleu", "chrf", "ter", "ter_signature"} <= set(by_file)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("--hyp", "H", "--run", "R"), "--hyp scores a translation as it is"),
        # A decoding option would do nothing: named, not ignored (0 is given too).
        (("--hyp", "H", "--length-penalty", "0"), "nothing decodes; drop --length-penalty"),
        (("--hyp", "H", "--coverage-penalty", "1"), "nothing decodes; drop --coverage-penalty"),
        (("--hyp", "H", "--threads", "1"), "nothing decodes; drop --threads"),
        ((), "pass --run RUN and --src FILE to translate, or --hyp FILE"),
    ],
)
def test_evaluate_needs_a_model_or_a_translation(tmp_path, monkeypatch, args, fragment, capsys):
    (tmp_path / "H").write_text("a\n")
    (tmp_path / "ref").write_text("a\n")
    monkeypatch.chdir(tmp_path)
    assert run_cli("evaluate", "--ref", "ref", *args) == 2
    assert fragment in capsys.readouterr().err


def test_evaluate_compares_several_translations_with_the_first(tmp_path, capsys):
    reference = tmp_path / "ref.txt"
    lines = [f"the {i} cats sat on {i + 1} mats" for i in range(30)]
    reference.write_text("".join(line + "\n" for line in lines))
    (tmp_path / "a.txt").write_text("".join(line[:9] + "\n" for line in lines))
    (tmp_path / "b.txt").write_text("".join(line + "\n" for line in lines))
    files = ("--ref", reference, "--hyp", tmp_path / "a.txt", "--hyp", tmp_path / "b.txt")
    assert run_cli("evaluate", *files) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith(f"{tmp_path / 'b.txt'}: BLEU 100.00")
    assert out[2].startswith(f"  against {tmp_path / 'a.txt'}: BLEU +")
    assert "paired test over the 30 sentences" in out[3]
    assert run_cli("evaluate", *files, "--json") == 0
    first, second = json.loads(capsys.readouterr().out)
    assert "against_first" not in first and second["bleu"] == 100.0
    assert second["against_first"]["bleu"]["difference"] == pytest.approx(100 - first["bleu"])
    assert run_cli("evaluate", *files, "--beam", "3") == 2
    assert "nothing decodes; drop --beam" in capsys.readouterr().err


def test_evaluate_reads_several_references(tmp_path, capsys):
    lines = [f"the {i} cats sat on {i + 1} mats" for i in range(30)]
    other = [f"{i} cats were on {i + 1} mats" for i in range(30)]
    for name, text in (("a", lines), ("b", other), ("hyp", other), ("short", other[:5])):
        (tmp_path / name).write_text("".join(line + "\n" for line in text))
    refs = ("--ref", tmp_path / "a", "--ref", tmp_path / "b")
    assert run_cli("evaluate", *refs, "--hyp", tmp_path / "hyp", "--json") == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["bleu"] == 100.0 and "nrefs:2" in scores["signature"]
    assert run_cli("evaluate", *refs, "--ref", tmp_path / "short", "--hyp", tmp_path / "hyp") == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'short'} has 5 lines but {tmp_path / 'a'} has 30" in err
