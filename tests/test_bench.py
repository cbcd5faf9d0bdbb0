"""scripts/bench.py train (bench_train.py): one JSON line of consistent throughput figures."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SCRIPTS
from torch import nn

from seq2seq.config import ModelConfig
from seq2seq.models import build_model


def test_train_measures_one_consistent_row(toy, bench_row, capsys):
    # One thread: two would wait on each other whenever another process holds a core.
    row = bench_row("train", "--config", str(toy / "run.yaml"), "--threads", "1", "--steps",
                    "2", "--warmup", "1", "--profile", "5", "--profile-updates", "1")  # fmt: skip
    assert row["mode"] == "train" and row["steps"] == 2 and row["threads"] == 1
    assert row["tokens_per_s"] > row["target_tokens_per_s"] > 0
    assert 0 <= row["padding_ratio"] < 1 and row["peak_rss_mb"] > 0
    assert row["compiled"] is False and row["warmup_seconds"] > 0
    err = capsys.readouterr().err
    assert "profile of 1 updates" in err and "aten::" in err
    flops = row["mflop_per_target_token"] * 1e6 * row["target_tokens_per_s"]
    assert row["mfu"] == pytest.approx(
        flops / (row["matmul_peak_gflops"] * 1e9), rel=0.02, abs=1e-4
    )


def test_data_prints_preparation_memory_and_first_updates(
    toy, tmp_path, load_script, monkeypatch, capsys
):
    """A small synthetic corpus in one training process: every figure there (two torchrun
    ranks would cost some 15 CPU seconds more; tests/test_distributed.py trains under
    torchrun). bench.py runs in this process; the commands it measures, in their own."""
    monkeypatch.syspath_prepend(str(SCRIPTS))  # where bench.py finds its parts
    argv = ["bench.py", "data", "--pairs", "500", "--work", str(tmp_path),
            "--config", str(toy / "run.yaml"), "--source", str(toy / "data/train"),
            "--set", "train.threads=1", "--ranks", "1"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    load_script("bench").main()
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    prepare, data, one = lines
    assert prepare["measure"] == "prepare" and prepare["pairs"] == 500
    assert prepare["seconds"] > 0 and prepare["peak_rss_mb"] > 0
    # 2 bytes a piece, 16 a pair (and the manifest, some 3 bytes a pair of a tiny corpus)
    assert 2 < prepare["bytes_per_token"] < 3 and 16 <= prepare["index_bytes_per_pair"] < 20
    assert data["measure"] == "data" and data["data_peak_mb"] >= 0
    assert one["processes"] == 1 and one["seconds"] > 0
    assert len(one["peak_rss_mb"]) == len(one["peak_pss_mb"]) == 1 and one["peak_pss_mb"][0] > 0
    assert (tmp_path / "corpus-500/train.src").read_text().count("\n") == 500


def test_matmul_weights_split_the_model_by_side(load_script):
    bench = load_script("bench_train")
    cfg = ModelConfig(arch="transformer", embed_dim=16, hidden_dim=16, ff_dim=32)
    model = build_model(cfg, 50, 60, 1)
    source, target = bench.matmul_weights(model)
    linears = [m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear)]
    assert source + target == sum(linears)
    # Encoder layers: 4 attention projections and 2 feed-forward matrices each.
    assert source == cfg.encoder_layers * (4 * 16 * 16 + 2 * 16 * 32)
    assert model.output.weight.numel() == 60 * 16  # the output layer counts on the target side


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (
            ["decode", "--run", ".", "--input", "README.md", "--threads", "0"],
            "--threads: 0 is less",
        ),
        (["diagnostics", "--config", "README.md", "--steps", "0"], "--steps: 0 is less than 1"),
        (["compare", "--base", "."], "compare needs a measurement after --"),
        (["decode", "--run", ".", "--input", "README.md", "--limit", "-3"], "--limit: -3 is less"),
        (
            ["decode", "--run", ".", ".", "--input", "README.md", "--engine", "ct2-int8"],
            "an ensemble of runs decodes with --engine torch only",
        ),
        (["losses", "--config", "README.md", "--steps", "-1"], "--steps: -1 is less than 1"),
        (["train", "--config", "README.md", "--warmup", "x"], "--warmup: 'x' is not a whole"),
    ],
)
def test_bad_arguments_are_one_line_before_anything_is_measured(arguments, problem):
    command = [sys.executable, str(SCRIPTS / "bench.py"), *arguments]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and problem in result.stderr, result.stderr


def spinners() -> int:
    """This process's children running the busy mode's Python loop."""
    found = 0
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            found += parent == os.getpid() and BUSY_LOOP in (entry / "cmdline").read_bytes()
        except (OSError, ValueError):  # not a process, or it ended meanwhile
            pass
    return found


BUSY_LOOP = b"while True: pass"


def test_decode_prints_a_row_in_a_process_of_its_own(trained, toy):
    command = [sys.executable, str(SCRIPTS / "bench.py"), "decode", "--run", str(trained),
               "--input", str(toy / "data/test.src"), "--beam", "1"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    (row,) = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert row["busy"] == 0 and row["threads"] == "default" and row["sentences_per_s"] > 0
    assert row["peak_rss_mb"] > 0


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="counts processes in /proc")
def test_the_busy_mode_keeps_cpus_busy_meanwhile_and_stops_them(load_script):
    bench = load_script("bench_decode")
    with bench.busy_cpus(2):
        assert spinners() == 2
    assert spinners() == 0  # none left behind


def test_compare_decoding_finds_the_first_line_that_differs(load_script):
    compare = load_script("compare_decoding")
    assert compare.first_difference(b"a\nb\n", b"a\nb\n") is None
    assert compare.first_difference(b"a\nb\nc\n", b"a\nB\nc\n") == 1
    assert compare.first_difference(b"a\n", b"a\nb\n") == 1  # one output is longer


def test_compare_decoding_runs_a_strategy_with_both_checkouts(
    trained, toy, tmp_path, load_script, monkeypatch, capsys
):
    """This checkout against itself: a strategy's command, with a file made from the
    references, runs with both and agrees (the script here, the commands in their own
    processes)."""
    argv = ["compare_decoding.py", "--base", str(SCRIPTS.parent), "--run", str(trained),
            "--input", str(toy / "data/test.src"), "--ref", str(toy / "data/test.tgt"),
            "--limit", "4", "--strategy", "prefixes", "--work", str(tmp_path)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as ended:
        load_script("compare_decoding").main()
    assert ended.value.code == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(row["strategy"], row["identical"], row["lines"]) for row in rows] == [
        ("prefixes", True, 4)
    ]
    assert (tmp_path / "prefixes.old").read_bytes() == (tmp_path / "prefixes.new").read_bytes()
