"""End to end through the command line: train, resume, translate, evaluate, average.

Bad input, one row per kind, is tests/test_bad_input.py.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from cli_helpers import run_cli, train, train_straight_and_resumed

from seq2seq.decode.translate import Translator


def parameters(run_dir: Path, name: str = "last") -> dict:
    path = run_dir / "checkpoints" / f"{name}.pt"
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


def test_a_resumed_run_ends_with_the_parameters_of_an_uninterrupted_one(toy, six_steps, tmp_path):
    resumed = tmp_path / "resumed"
    assert train(toy, resumed, "train.max_steps=4") == 0
    assert train(toy, resumed, "train.max_steps=6") == 0
    assert "resumed" in (resumed / "train.log").read_text()
    a, b = parameters(six_steps), parameters(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    progress = torch.load(six_steps / "checkpoints/last.pt", weights_only=True)["progress"]
    assert progress["step"] == 6


def test_a_run_directory_holds_everything_a_run_leaves(six_steps):
    for name in ("config.yaml", "meta.json", "train.log", "tokenizer/joint.model"):
        assert (six_steps / name).is_file(), name
    assert (six_steps / "checkpoints/best.pt").is_file()
    assert len(list((six_steps / "checkpoints").glob("step-*.pt"))) == 2  # keep_best
    assert list((six_steps / "tensorboard").iterdir())
    heatmaps = sorted((six_steps / "attention").glob("step-6-*.png"))
    assert len(heatmaps) == 3 and all(p.read_bytes().startswith(b"\x89PNG") for p in heatmaps)
    scores = json.loads((six_steps / "test/scores.json").read_text())
    assert set(scores["test"]) >= {"bleu", "chrf", "signature"}
    assert "nrefs:1" in scores["test"]["signature"]
    assert len((six_steps / "test/test.hyp").read_text().splitlines()) == 10  # the test set's


def test_meta_names_the_machines_the_run_computed_on(toy, six_steps, tmp_path):
    """Floats repeat only on the same kind of CPU: meta.json says which ones it was."""
    [machine] = json.loads((six_steps / "meta.json").read_text())["machines"]
    assert machine["cpus"] == os.cpu_count() and machine["gpu"] is None
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():  # Linux: its model name line
        assert f"model name\t: {machine['cpu']}\n" in cpuinfo.read_text()
    assert machine["cpu"]
    moved = tmp_path / "moved"  # trained on another machine, then resumed on this one
    assert train(toy, moved, "train.max_steps=2") == 0
    meta = json.loads((moved / "meta.json").read_text())
    elsewhere = machine | {"cpu": "another CPU"}
    (moved / "meta.json").write_text(json.dumps(meta | {"machines": [elsewhere]}))
    assert train(toy, moved, "train.max_steps=4") == 0
    assert json.loads((moved / "meta.json").read_text())["machines"] == [elsewhere, machine]
    warning = f"resumed on {machine['cpu']}, trained on another CPU so far: it goes on from"
    assert (moved / "train.log").read_text().count(warning) == 1
    assert train(toy, moved, "train.max_steps=6") == 0  # the same machine again: one entry
    assert json.loads((moved / "meta.json").read_text())["machines"] == [elsewhere, machine]
    assert (moved / "train.log").read_text().count(warning) == 1  # and no second warning


def test_translate_writes_one_line_per_input_line(six_steps, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("boka mimi\n\n   \ntoto tape podo\n")
    output = tmp_path / "out.txt"
    assert run_cli("translate", "--run", six_steps, "--input", source, "--output", output) == 0
    lines = output.read_text().split("\n")
    assert len(lines) == 5 and lines[-1] == ""  # four lines, each ending in a newline
    assert lines[1] == "" and lines[2] == ""  # empty and blank lines stay empty


def test_plot_attention_draws_a_sentence_and_prints_its_translation(six_steps, tmp_path, capsys):
    picture = tmp_path / "map.png"
    assert run_cli("plot-attention", "--run", six_steps, "--src", "toto tape", "-o", picture) == 0
    assert picture.read_bytes().startswith(b"\x89PNG")
    assert len(capsys.readouterr().out.splitlines()) == 1  # the translation
    assert run_cli("plot-attention", "--run", six_steps, "--src", "  ") == 2


def test_evaluate_prints_the_scores_as_json(toy, six_steps, capsys):
    data = toy / "data"
    args = ["--src", data / "test.src", "--ref", data / "test.tgt", "--json"]
    assert run_cli("evaluate", "--run", six_steps, *args) == 0
    result = json.loads(capsys.readouterr().out)
    assert 0 <= result["bleu"] <= 100 and "nrefs:1" in result["signature"]


TRANSFORMER = [
    "model.arch=transformer",
    "model.ff_dim=32",
    "model.encoder_layers=2",
    "model.decoder_layers=2",
    "model.attention.type=local-p",
    "model.tied_embeddings=true",
    "model.shared_embeddings=true",
]


def test_transformer_resumes_exactly_and_translates(toy, tmp_path, capsys):
    # Validations, and with them resume checkpoints, at every second step.
    straight, resumed = train_straight_and_resumed(toy, tmp_path, *TRANSFORMER, steps=4, stop=2)
    a, b = parameters(straight), parameters(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    ratio = float(a["length_ratio"])
    assert 0.5 < ratio < 2 and ratio != 1.0  # measured on the corpus, saved with the model

    source = tmp_path / "in.txt"
    source.write_text("boka mimi\n\ntoto tape podo\n")
    output = tmp_path / "out.txt"
    assert run_cli("translate", "--run", straight, "--input", source, "--output", output) == 0
    assert output.read_text().count("\n") == 3
    picture = tmp_path / "map.png"
    assert run_cli("plot-attention", "--run", straight, "--src", "toto tape", "-o", picture) == 0
    assert picture.read_bytes().startswith(b"\x89PNG")


SOURCES = ["boka mimi toto tape podo", "", "toto", "   ", "mimi tape podo boka", "tape"]


def translate_file(run_dir: Path, tmp_path: Path, lines: list[str], *options: str) -> list[str]:
    source, output = tmp_path / "src.txt", tmp_path / "out.txt"
    source.write_text("".join(line + "\n" for line in lines))
    args = ["translate", "--run", run_dir, "-i", source, "-o", output, *options]
    assert run_cli(*args) == 0
    return output.read_text().split("\n")[:-1]


def test_translate_batches_in_any_order_and_restores_the_input_order(trained, tmp_path):
    # On the CPU: a GPU's kernels change with the batch's shape, and with them the rounding
    # that may break a near-tie of this barely trained model either way.
    cpu = ("--beam", "3", "--device", "cpu")
    batched = translate_file(trained, tmp_path, SOURCES, *cpu)
    assert len(batched) == len(SOURCES) and batched[1] == batched[3] == ""
    one_by_one = translate_file(trained, tmp_path, SOURCES, *cpu, "--batch-tokens", "1")
    assert one_by_one == batched
    backwards = translate_file(trained, tmp_path, SOURCES[::-1], *cpu)
    assert backwards == batched[::-1]


def test_nbest_lists_are_tab_separated_sorted_and_distinct(trained, tmp_path):
    rows = translate_file(trained, tmp_path, SOURCES, "--beam", "4", "--nbest", "3")
    assert len(rows) == 3 * len(SOURCES)
    best = translate_file(trained, tmp_path, SOURCES, "--beam", "4")
    for i in range(len(SOURCES)):
        fields = [row.split("\t") for row in rows[3 * i : 3 * i + 3]]
        assert all(len(f) == 3 and f[0] == str(i) for f in fields)
        scores = [float(f[1]) for f in fields]
        assert scores == sorted(scores, reverse=True)
        assert fields[0][2] == best[i]
        if SOURCES[i].strip():
            assert len({f[2] for f in fields}) == 3 or scores[-1] == float("-inf")


def test_alignments_are_pharaoh_pairs_of_valid_words(trained, tmp_path):
    links = tmp_path / "links.txt"
    outputs = translate_file(trained, tmp_path, SOURCES, "--alignments", links)
    lines = links.read_text().split("\n")[:-1]
    assert len(lines) == len(SOURCES)
    for source, output, line in zip(SOURCES, outputs, lines, strict=True):
        pairs = [tuple(map(int, pair.split("-"))) for pair in line.split()]
        if not output:
            assert pairs == []
            continue
        assert pairs == sorted(set(pairs))
        assert all(0 <= i < len(source.split()) and 0 <= j < len(output.split()) for i, j in pairs)
        assert {j for _, j in pairs} <= set(range(len(output.split())))


def test_attention_is_written_as_a_json_line_per_input_line(trained, tmp_path):
    """--attention: the best translation's weights and the pieces that label them, as the
    Translator has them; null for a blank line."""
    weights = tmp_path / "attention.jsonl"
    outputs = translate_file(trained, tmp_path, SOURCES, "--attention", weights)
    records = [json.loads(line) for line in weights.read_text().splitlines()]
    translator = Translator.load(trained)
    found = translator.hypotheses(SOURCES)
    assert len(records) == len(SOURCES)
    for source, output, record, hyps in zip(SOURCES, outputs, records, found, strict=True):
        if not source.strip():
            assert record is None
            continue
        assert record == translator.attention_record(source, hyps[0])
        assert output == hyps[0].text
        rows = torch.tensor(record["weights"])  # (target, [heads,] source)
        assert rows.shape[0] == len(record["target"]) and rows.shape[-1] == len(record["source"])
        assert record["source"][-1] == record["target"][-1] == "</s>"
        assert torch.allclose(rows.sum(-1), torch.ones(()), atol=1e-3)  # a distribution each


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


def test_console_script_reports_one_line_and_status_2(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "seq2seq", "train", "--config", str(tmp_path / "none.yaml")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "config file" in result.stderr


def test_average_of_checkpoints_is_their_mean_and_translates(trained, tmp_path, capsys):
    steps = sorted((trained / "checkpoints").glob("step-*.pt"))
    assert len(steps) == 2
    assert run_cli("average", "--run", trained, "--last", "2") == 0
    averaged = parameters(trained, "averaged")
    a, b = (torch.load(p, map_location="cpu", weights_only=True)["model"] for p in steps)
    for name, tensor in averaged.items():
        torch.testing.assert_close(tensor, (a[name] + b[name]) / 2)
    assert not torch.equal(a["decoder.output.weight"], b["decoder.output.weight"])
    out = translate_file(trained, tmp_path, ["toto tape"], "--checkpoint", "averaged")
    assert len(out) == 1

    mine = tmp_path / "mine.pt"
    names = [p.stem for p in steps]
    assert run_cli("average", "--run", trained, "--checkpoints", *names[:1], "-o", mine) == 0
    assert torch.equal(torch.load(mine, weights_only=True)["model"]["decoder.output.weight"],
                       a["decoder.output.weight"])  # fmt: skip
    capsys.readouterr()
    assert run_cli("average", "--run", trained, "--last", "5") == 2
    assert "--last 5" in one_error_line(capsys)
    assert run_cli("average", "--run", trained) == 2
    assert "either --last N or --checkpoints" in one_error_line(capsys)


def test_a_terminal_gets_each_translation_as_soon_as_its_line_is_typed(trained, tmp_path):
    import os
    import pty
    import select

    expected = translate_file(trained, tmp_path, ["toto tape", "mimi"])
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "seq2seq", "translate", "--run", str(trained)],
        stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(follower)
    try:
        # An invalid byte costs its own line only (an empty translation), not the session.
        lines = [b"toto tape", b"mimi \xff", b"mimi"]
        for line, translation in zip(lines, [expected[0], "", expected[1]], strict=True):
            os.write(leader, line + b"\n")
            # The answer comes while stdin is still open: flushed per line, not at the end.
            ready, _, _ = select.select([process.stdout], [], [], 60)
            assert ready, "no translation within 60 s"
            assert process.stdout.readline().decode().rstrip("\n") == translation
        os.write(leader, b"\x04")  # Ctrl-D
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        os.close(leader)


def test_export_and_its_engine_without_the_extra_are_one_line(
    trained, tmp_path, monkeypatch, capsys
):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import ctranslate2 fails
    for args in (
        ("export", "--run", trained, "--output", tmp_path / "out"),
        ("translate", "--engine", "ctranslate2", "--run", tmp_path, "-i", tmp_path / "x"),
    ):
        assert run_cli(*args) == 2
        err = capsys.readouterr().err.strip()
        assert "pip install -e '.[export]'" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()
