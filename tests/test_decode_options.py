"""One declaration of the decoding options: the commands, the server's request, the Python
`Translator` and `scripts/bench.py decode` expose exactly the decode section's fields
(`DecodeConfig`) and the per-call options (`PER_CALL_OPTIONS`), each checked as the config
checks it."""

from __future__ import annotations

import inspect
import re
import sys

import pytest
import typer
from cli_helpers import run_cli
from conftest import SCRIPTS

from seq2seq.cli import app
from seq2seq.cli.decoding import FORCED_FIELDS, flag
from seq2seq.config import DecodeConfig
from seq2seq.config.decode import PER_CALL_OPTIONS
from seq2seq.decode.line_translator import LineTranslator
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError

FIELDS = set(DecodeConfig.model_fields)
# Each surface's spelling of the per-call options, in PER_CALL_OPTIONS' order.
CLI_PER_CALL = ("nbest", "token_scores", "attention", "prefix_file", "constraint_file")
SERVER_PER_CALL = ("nbest", "attention", "token_scores", "prefix", "constraints")
# What the commands take besides decoding: the model, the files, where it computes.
NOT_DECODING = {
    "translate": {"run", "checkpoint", "input", "output", "device", "alignments",
                  "alignment_head", "engine", "threads", "int8"},
    "evaluate": {"ref", "run", "src", "hyp", "corpus", "checkpoint", "device", "threads", "int8",
                 "as_json"},
    "score": {"run", "src", "ref", "output", "checkpoint", "device", "threads", "token_scores",
              "alignments", "alignment_head", "attention"},
    "serve": {"run", "checkpoint", "host", "port", "device", "max_lines", "max_chars", "timeout",
              "max_queue", "batch_lines", "batch_wait_ms", "read_timeout", "allowed_host",
              "threads"},
}  # fmt: skip


def options_of(command: str) -> set[str]:
    click_app = typer.main.get_command(app)
    return {param.name for param in click_app.commands[command].params}


def test_the_commands_take_every_decode_field_and_the_per_call_options():
    assert len(CLI_PER_CALL) == len(SERVER_PER_CALL) == len(PER_CALL_OPTIONS)
    assert options_of("translate") == FIELDS | set(CLI_PER_CALL) | NOT_DECODING["translate"]
    assert options_of("evaluate") == FIELDS | NOT_DECODING["evaluate"]
    assert options_of("serve") == FIELDS | NOT_DECODING["serve"]  # the served defaults
    assert options_of("score") == set(FORCED_FIELDS) | NOT_DECODING["score"]


def test_the_server_request_has_every_decode_field_and_the_per_call_options():
    from seq2seq.serve.schema import TranslateRequest

    assert set(TranslateRequest.model_fields) == {"text"} | FIELDS | set(SERVER_PER_CALL)


def test_the_translator_takes_every_decode_field_and_the_per_call_options(trained):
    translator = Translator.load(trained, threads=1)
    every = {name: getattr(translator.decode, name) for name in FIELDS}
    assert translator.translate(["mimi toto"], **every) == translator.translate(["mimi toto"])
    keywords = inspect.signature(LineTranslator.hypotheses).parameters
    assert set(PER_CALL_OPTIONS) <= set(keywords)
    with pytest.raises(UserError, match="unknown key 'beams'"):
        translator.translate(["mimi toto"], beams=2)


def test_bench_decode_takes_every_decode_field(load_script, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # where bench.py finds its modules
    bench = load_script("bench")
    monkeypatch.setattr(sys, "argv", ["bench.py", "decode", "--help"])
    with pytest.raises(SystemExit):
        bench.parse_arguments()
    shown = set(re.findall(r"--[a-z-]+", capsys.readouterr().out))
    assert {flag(name) for name in FIELDS} <= shown and "--no-sample" in shown


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--beam", "0", "beam = 0: Input should be greater than or equal to 1"),
        ("--top-p", "1.5", "top_p = 1.5: Input should be less than or equal to 1"),
        ("--stopping", "never", "stopping = 'never': Input should be 'beam', 'early' or 'exact'"),
        ("--max-len-ratio", "nan", "max_len_ratio = nan: Input should be a finite number"),
    ],
)
def test_a_bad_value_names_its_option_and_the_field(trained, tmp_path, capsys, option, value,
                                                    message):  # fmt: skip
    source = tmp_path / "src.txt"
    source.write_text("mimi toto\n")
    assert run_cli("translate", "--run", trained, "-i", source, option, value) == 2
    err = capsys.readouterr().err
    assert f"'{option}'" in err and message in err and len(err.strip().splitlines()) == 1


def test_fields_new_to_the_command_line_reach_the_search(trained, tmp_path, capsys):
    source = tmp_path / "src.txt"
    source.write_text("mimi toto tape\n")
    limits = ("--max-len-ratio", "0.1", "--max-len-offset", "0", "--min-len", "0")
    assert run_cli("translate", "--run", trained, "-i", source, *limits, "--stopping", "exact") == 0
    written = capsys.readouterr().out.strip()
    expected = Translator.load(trained, threads=1).translate(
        ["mimi toto tape"], max_len_ratio=0.1, max_len_offset=0, min_len=0, stopping="exact"
    )
    assert written == expected[0]
    # at most 0.1 x the source's pieces and no offset: not the run's own limit
    assert len(written.split()) < len(Translator.load(trained).translate(["mimi toto tape"])[0])


def test_what_combines_within_a_call_is_decided_once_and_spelled_per_surface():
    from seq2seq.cli.decoding import cli_spelling
    from seq2seq.config.decode import call_problem
    from seq2seq.serve.request import json_spelling

    narrow, sampling = DecodeConfig(beam=2), DecodeConfig(beam=1, sample=True)
    assert call_problem(narrow, 2, constrained=True) is None
    assert call_problem(narrow, 3, False) == "nbest=3 needs a beam at least as wide; set beam=3"
    assert call_problem(narrow, 3, False, cli_spelling).endswith("set --beam 3")
    assert call_problem(narrow, 3, False, json_spelling).endswith('set "beam": 3')
    assert call_problem(sampling, 4, False) is None  # n samples need no beam
    assert call_problem(DecodeConfig(beam=4, mbr=2), 3, False).startswith("nbest=3 needs as many")
    assert call_problem(sampling, 1, True, cli_spelling).endswith("drop --sample")
    groups = DecodeConfig(beam=4, beam_groups=2)
    assert "set beam_groups=1" in call_problem(groups, 1, True)
    assert "a beam of at least 2" in call_problem(DecodeConfig(beam=1), 1, True)
