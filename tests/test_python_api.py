"""The Python API (docs/python-api.md): `from seq2seq import Translator`."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli

from seq2seq import Translation, Translator
from seq2seq.errors import UserError

DOC = Path(__file__).resolve().parent.parent / "docs/python-api.md"
LINES = ["boka mimi toto tape podo", "", "toto", "mimi tape podo boka"]


def test_translate_gives_the_command_lines_translations(trained, tmp_path):
    translator = Translator.load(trained)
    best = translator.translate(LINES, beam=3)
    source, output = tmp_path / "src.txt", tmp_path / "out.txt"
    source.write_text("".join(line + "\n" for line in LINES))
    assert run_cli("translate", "--run", trained, "-i", source, "-o", output, "--beam", "3") == 0
    assert best == output.read_text().splitlines() and best[1] == ""
    assert translator.decode.beam == 5  # a call's options are that call's only


def test_nbest_and_hypotheses_carry_scores_and_attention(trained):
    translator = Translator.load(trained, beam=4)
    nbest = translator.translate(LINES, nbest=3)
    assert [len(texts) for texts in nbest] == [3, 0, 3, 3]
    assert [texts[0] for texts in nbest if texts] == [t for t in translator.translate(LINES) if t]
    found = translator.hypotheses(LINES, nbest=2)
    assert found[1] == []
    first, second = found[0]
    assert isinstance(first, Translation) and first.score >= second.score
    source_pieces = len(translator.tokenizer.src_pieces(LINES[0])) + 1  # and EOS
    assert first.attention.shape == (len(first.tokens) + 1, source_pieces)
    torch.testing.assert_close(first.attention.sum(-1), torch.ones(len(first.tokens) + 1))


def test_int8_weights_quantize_every_linear_layer_and_keep_the_log_probabilities(trained):
    full, int8 = Translator.load(trained, device="cpu"), Translator.load(trained, int8=True)
    linear = [m for m in int8.model.modules() if type(m) is torch.nn.Linear]
    assert not linear and full.model is not int8.model
    src_ids = full.tokenizer.encode_src(["boka mimi toto tape podo"])[0]
    src = torch.tensor([[*src_ids, 3]])
    mask = torch.ones(1, 1, src.size(1), dtype=torch.bool)
    tgt = torch.tensor([[2, *src_ids]])
    with torch.no_grad():
        a = full.model(src, mask, tgt).log_softmax(-1)
        b = int8.model(src, mask, tgt).log_softmax(-1)
    assert 0 < (a - b).abs().max() < 0.05 * a.abs().max()
    assert len(int8.translate(LINES)) == len(LINES)


def test_int8_decodes_on_the_cpu_where_the_run_says_cuda_unless_told_otherwise(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    config = run / "config.yaml"
    text = config.read_text()
    assert "  device: auto\n" in text
    config.write_text(text.replace("  device: auto\n", "  device: cuda\n"))
    assert Translator.load(run, int8=True).device == torch.device("cpu")
    if torch.cuda.is_available():  # asked for both: refused, naming the ways out
        with pytest.raises(UserError, match="CPU only, not cuda; drop int8 or the device"):
            Translator.load(run, device="cuda", int8=True)


def test_the_command_line_decodes_int8_as_the_python_api_does(trained, tmp_path, capsys):
    source, output = tmp_path / "src.txt", tmp_path / "out.txt"
    source.write_text("".join(line + "\n" for line in LINES))
    assert run_cli("translate", "--run", trained, "-i", source, "-o", output, "--int8") == 0
    assert output.read_text().splitlines() == Translator.load(trained, int8=True).translate(LINES)
    # --int8 where nothing would be quantized: one line naming what to do instead
    assert run_cli("translate", "--run", trained, "-i", source, "--int8",
                   "--engine", "ctranslate2") == 2  # fmt: skip
    assert "--quantization int8" in capsys.readouterr().err
    assert run_cli("evaluate", "--hyp", source, "--ref", source, "--int8") == 2
    assert "drop --int8" in capsys.readouterr().err


def test_greedy_is_beam_one(trained):
    greedy = Translator.load(trained, beam=1).translate(LINES)
    assert Translator.load(trained).translate(LINES, beam=1) == greedy


@pytest.mark.parametrize(
    "call, error, fragment",
    [
        (lambda t: t.translate(LINES, beem=2), UserError, "unknown key 'beem'; allowed here"),
        (lambda t: t.translate(LINES, beam=0), UserError, "bad decoding option: beam"),
        (lambda t: t.translate(LINES, beam=2, nbest=3), UserError, "set beam=3"),
        (lambda t: t.translate("boka mimi"), TypeError, "[sentence]"),
    ],
)
def test_bad_calls_name_the_problem(trained, call, error, fragment):
    with pytest.raises(error, match=re.escape(fragment)):
        call(Translator.load(trained))


@pytest.fixture(scope="module")
def translator(trained) -> Translator:
    return Translator.load(trained)


@pytest.mark.parametrize(
    "lines, options, error, message",
    [
        (b"boka mimi", {}, TypeError, "lines must be a list of strings, not bytes"),
        ({"boka": 1}, {}, TypeError, "lines must be a list of strings, not dict"),
        ([None], {}, TypeError, "lines[0] is NoneType, not str"),
        (["toto", b"boka"], {}, TypeError, "lines[1] is bytes, not str; decode bytes first"),
        (
            ["toto", "a\ud800"],
            {},
            UserError,
            "lines[1]: character 1 is a lone surrogate (U+D800), which is not text",
        ),
        (LINES, {"nbest": 0}, UserError, "nbest 0: ask for at least 1 hypothesis per line"),
        (LINES, {"nbest": -2}, UserError, "nbest -2: ask for at least 1"),
        (LINES, {"nbest": 1.5}, TypeError, "nbest must be an int, not float"),
        (LINES, {"beam": True}, TypeError, "beam must be a number or a name, not a bool (True)"),
        (LINES, {"length_penalty": False}, TypeError, "length_penalty must be a number or a name"),
        (LINES, {"sample": "no"}, TypeError, "sample must be True or False, not str"),
    ],  # fmt: skip
)
def test_wrong_lines_and_nbest_are_a_type_error_or_a_user_error(
    translator, lines, options, error, message
):
    for call in (translator.translate, translator.hypotheses):
        with pytest.raises(error, match=re.escape(message)):
            call(lines, **options)


def test_a_wrong_line_for_the_attention_map_is_a_type_error_or_a_user_error(translator):
    with pytest.raises(TypeError, match=re.escape("line is NoneType, not str")):
        translator.attention_map(None)
    with pytest.raises(UserError, match=re.escape("line: character 4 is a lone surrogate")):
        translator.attention_map("toto\udc80")


def test_wrong_load_arguments_are_a_type_error_or_a_user_error(trained):
    with pytest.raises(UserError, match=re.escape("device 'tpu' is not one of auto, cpu, cuda")):
        Translator.load(trained, device="tpu")
    with pytest.raises(TypeError, match="device must be 'cpu', 'cuda' or 'auto', not int"):
        Translator.load(trained, device=0)
    with pytest.raises(
        TypeError, match="checkpoint must be a str or a path, or a list of them, not int"
    ):
        Translator.load(trained, checkpoint=5)
    with pytest.raises(TypeError, match="int8 must be True or False, not str"):
        Translator.load(trained, int8="no")
    with pytest.raises(TypeError, match="beam must be a number or a name, not a bool"):
        Translator.load(trained, beam=True)
    with pytest.raises(
        TypeError, match="run_dir must be a str or a path, or a list of them, not NoneType"
    ):
        Translator.load(None)
    by_path = Translator.load(trained, checkpoint=Path(trained) / "checkpoints/best.pt")
    assert by_path.translate(LINES) == Translator.load(trained).translate(LINES)


def test_bad_loads_name_the_problem(trained, tmp_path):
    with pytest.raises(UserError, match="nowhere"):
        Translator.load(tmp_path / "nowhere")
    with pytest.raises(UserError, match="step-999"):
        Translator.load(trained, "step-999")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="no CUDA device"):
            Translator.load(trained, device="cuda")


def test_the_documented_example_runs(trained, tmp_path, monkeypatch, capsys):
    """docs/python-api.md's example, on the trained toy run in place of runs/demo."""
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL).group(1)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs/demo").symlink_to(trained)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(DOC), "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 4 and printed[0].startswith("[") and "''" in printed[0]


def test_a_source_tree_that_is_not_installed_has_an_unknown_version():
    """On PYTHONPATH without `pip install` (a cluster node) there is no package metadata:
    `import seq2seq` and the command line still work, and say the version is unknown."""
    script = (
        "import importlib.metadata as m, sys\n"
        "def missing(name):\n"
        "    raise m.PackageNotFoundError(name)\n"
        "m.version = missing\n"  # as if seq2seq were not installed
        "import seq2seq\n"
        "print(seq2seq.__version__)\n"
        "from seq2seq.cli import main\n"
        "sys.argv = ['seq2seq', '--version']\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["0+unknown", "seq2seq 0+unknown"]


def test_decode_batches_default_to_the_device_and_a_set_size_wins(trained):
    from seq2seq.config import DecodeConfig
    from seq2seq.decode.line_translator import CPU_BATCH_TOKENS, GPU_BATCH_TOKENS

    translator = Translator.load(trained, device="cpu")
    assert translator.batch_tokens(DecodeConfig()) == CPU_BATCH_TOKENS
    translator.on_gpu = True  # as a translator on a GPU is
    assert translator.batch_tokens(DecodeConfig()) == GPU_BATCH_TOKENS > CPU_BATCH_TOKENS
    assert translator.batch_tokens(DecodeConfig(batch_tokens=123)) == 123
    # The lines come back alike whatever the batches (on the CPU, to the last digit).
    lines = ["boka mimi toto", "tape", "mimi tape podo boka"] * 5
    small = translator.translate(lines, beam=3, batch_tokens=12)
    assert translator.translate(lines, beam=3) == small


@pytest.mark.parametrize(
    "sources, references, error, message",
    [
        ([None], ["x"], TypeError, "sources[0] is NoneType, not str"),
        (["x"], [3], TypeError, "references[0] is int, not str"),
        ([b"x"], ["x"], TypeError, "sources[0] is bytes, not str; decode bytes first"),
        ((s for s in ["x"]), ["x"], TypeError, "sources must be a list of strings, not generator"),
        (["a\ud800"], ["x"], UserError, "sources[0]: character 1 is a lone surrogate"),
        ("boka", ["x"], TypeError, "pass sources as a list of lines"),
    ],
)
def test_attention_diagnostics_checks_its_lines_as_translate_does(
    translator, sources, references, error, message
):
    for call in (translator.attention_diagnostics, translator.score):
        with pytest.raises(error, match=re.escape(message)):
            call(sources, references)
