"""`seq2seq inspect` and `Translator.attention_diagnostics`: a trained model's attention."""

import json

from cli_helpers import run_cli

from seq2seq import Translator
from seq2seq.attention.diagnostics import DIAGNOSTICS
from seq2seq.data.corpus import read_lines


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
    assert entry["mean"].keys() >= set(DIAGNOSTICS) and entry["mean"]["v_norm"] > 0  # bahdanau
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
