"""CPU threads: the default (the CPUs this process may use), the passive OpenMP wait
policy the command line sets before torch loads, `--threads` on the commands that
translate, `Translator.load(threads=...)`, and `train.threads` changed on resume."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from cli_helpers import run_cli, train

from seq2seq.data.corpus import read_lines
from seq2seq.decode.translate import Translator
from seq2seq.device import default_threads, use_threads
from seq2seq.errors import UserError


@pytest.fixture
def keep_threads():
    """Restore this process's CPU threads after a test that sets them."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_default_is_the_cpus_this_process_may_use_shared_among_processes(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    assert default_threads() == 3
    assert default_threads(processes=2) == 1
    assert default_threads(processes=8) == 1  # never 0


def test_use_threads_sets_torch_and_refuses_what_is_not_a_count(keep_threads):
    assert use_threads(1) == 1 and torch.get_num_threads() == 1
    assert use_threads(None) == default_threads() == torch.get_num_threads()
    for bad in (0, -2, 1.5, "2", True):
        with pytest.raises(UserError, match="threads"):
            use_threads(bad)


def test_more_threads_than_four_per_usable_cpu_are_one_line_wherever_they_are_given(
    trained, toy, tmp_path, keep_threads, monkeypatch, capsys
):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert use_threads(8) == 8  # 4 per usable CPU: allowed
    with pytest.raises(UserError, match=r"threads=9: at most 8 \(4 per CPU .* 2 here\)"):
        use_threads(9)
    with pytest.raises(UserError, match="threads=65536: at most 8"):
        Translator.load(trained, threads=65536)
    source = tmp_path / "src.txt"
    source.write_text("mimi toto\n")
    capsys.readouterr()
    assert run_cli("translate", "--run", trained, "-i", source, "--threads", "16384") == 2
    assert capsys.readouterr().err.strip().startswith("seq2seq: error: threads=16384: at most 8")
    assert train(toy, tmp_path / "r", "train.threads=100", "train.max_steps=1") == 2
    assert "threads=100: at most 8" in capsys.readouterr().err
    assert not (tmp_path / "r/checkpoints/last.pt").exists()


def test_the_command_line_waits_passively_unless_the_user_says_otherwise():
    probe = (
        "import os, sys, seq2seq.cli; print(os.environ['OMP_WAIT_POLICY'], 'torch' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    for given, expected in ((None, "PASSIVE False"), ("ACTIVE", "ACTIVE False")):
        run_env = env if given is None else env | {"OMP_WAIT_POLICY": given}
        done = subprocess.run([sys.executable, "-c", probe], env=run_env, capture_output=True,
                              text=True, timeout=60, check=True)  # fmt: skip
        assert done.stdout.strip() == expected  # set before any command imports torch


def test_translate_and_evaluate_take_threads_which_change_no_output(
    trained, toy, tmp_path, keep_threads, capsys
):
    source, reference = toy / "data/test.src", toy / "data/test.tgt"
    outputs = []
    for threads in ("1", "2"):
        output = tmp_path / f"out{threads}.txt"
        assert run_cli("translate", "--run", trained, "-i", source, "-o", output,
                       "--beam", "2", "--threads", threads) == 0  # fmt: skip
        assert torch.get_num_threads() == int(threads)
        outputs.append(read_lines(output))
    assert outputs[0] == outputs[1]
    assert run_cli("evaluate", "--run", trained, "--src", source, "--ref", reference,
                   "--threads", "1", "--json") == 0  # fmt: skip
    assert torch.get_num_threads() == 1
    assert run_cli("translate", "--run", trained, "-i", source, "--threads", "0") == 2
    assert "--threads" in capsys.readouterr().err


def test_translator_load_takes_threads(trained, keep_threads):
    torch.set_num_threads(2)
    Translator.load(trained)
    assert torch.get_num_threads() == 2  # left as it is by default
    Translator.load(trained, threads=1)
    assert torch.get_num_threads() == 1
    with pytest.raises(UserError, match="threads=0"):
        Translator.load(trained, threads=0)


def test_a_run_resumes_with_other_threads(toy, tmp_path, keep_threads):
    run_dir = tmp_path / "run"
    assert train(toy, run_dir, "train.max_steps=2", "data.test=[]") == 0
    assert train(toy, run_dir, "train.max_steps=4", "data.test=[]", "train.threads=2") == 0
    assert "resumed" in (run_dir / "train.log").read_text()
    assert "2 CPU threads" in (run_dir / "train.log").read_text().split("resumed")[1]
