"""CPU threads: the default (the CPUs this process may use), decoding's default (the CPUs
other processes leave free, looked at again batch by batch), the passive OpenMP wait
policy the command line sets before torch loads, `--threads` on the commands that
translate, `Translator.load(threads=...)`, and `train.threads` changed on resume."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
import torch
from cli_helpers import run_cli, train

from seq2seq import device
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


def test_translator_load_takes_threads(trained, keep_threads, monkeypatch):
    monkeypatch.setattr(device, "free_cpus", lambda: pytest.fail("threads were given"))
    translator = Translator.load(trained, threads=1)
    assert torch.get_num_threads() == 1 and translator.cpu_threads is None
    translator.translate(["mimi toto"])
    assert torch.get_num_threads() == 1  # a count given stays
    with pytest.raises(UserError, match="threads=0"):
        Translator.load(trained, threads=0)


def free_cpus_seen(monkeypatch, mask: set[int], cpus: int, looks: list[int | None]) -> int:
    """`free_cpus()` where the process may use `mask` of `cpus` CPUs and its three looks
    at the other processes' runnable tasks find `looks`."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: mask, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    monkeypatch.setattr(device, "_others_running", iter(looks).__next__)
    return device.free_cpus()


def test_free_cpus_are_the_usable_ones_other_processes_leave(monkeypatch):
    assert free_cpus_seen(monkeypatch, {0, 1}, 2, [0, 0, 0]) == 2
    assert free_cpus_seen(monkeypatch, {0, 1}, 2, [1, 1, 1]) == 1
    assert free_cpus_seen(monkeypatch, {0, 1}, 2, [2, 3, 2]) == 1  # never 0
    assert free_cpus_seen(monkeypatch, {0, 1}, 2, [2, 0, 0]) == 2  # one look passing by
    assert free_cpus_seen(monkeypatch, {0, 1, 2, 3}, 4, [0, 1, 1]) == 3
    # others take the CPUs outside the mask first: 6 others on 8 CPUs leave this one 2
    assert free_cpus_seen(monkeypatch, {0, 1}, 8, [6, 6, 6]) == 2
    assert free_cpus_seen(monkeypatch, {0, 1}, 8, [7, 7, 7]) == 1
    assert free_cpus_seen(monkeypatch, {0, 1, 2}, 3, [None]) == 3  # no /proc: all usable


def test_a_busy_process_is_counted_and_this_ones_threads_are_not():
    if device._others_running() is None:
        pytest.skip("no /proc/loadavg here: free_cpus counts no other process")
    spinner = subprocess.Popen([sys.executable, "-c", "while 1: pass"])  # not bench's loop
    try:
        time.sleep(0.2)
        assert sorted(device._others_running() for _ in range(3))[1] >= 1
    finally:
        spinner.kill()
        spinner.wait()
    done = threading.Event()
    own = threading.Thread(target=lambda: [None for _ in iter(done.is_set, True)])
    own.start()  # a thread of this process, always runnable: subtracted as this one's
    try:
        assert device._own_running() >= 2  # it and this one, reading
    finally:
        done.set()
        own.join()


def test_decoding_threads_follow_the_free_cpus_batch_by_batch(trained, keep_threads, monkeypatch):
    free = iter([1, 2])
    monkeypatch.setattr(device, "free_cpus", lambda: next(free))
    translator = Translator.load(trained, batch_tokens=8)  # a batch per line or two
    translator.cpu_threads.every = 0  # look before every batch
    translator.translate(["mimi toto"])
    assert torch.get_num_threads() == 1
    translator.score(["mimi toto"], ["toto"])
    assert torch.get_num_threads() == 2
    translator.cpu_threads.every = 3600.0  # looked just now: not again within the hour
    monkeypatch.setattr(device, "free_cpus", lambda: pytest.fail("looked again"))
    translator.translate(["mimi toto", "toto"])
    assert torch.get_num_threads() == 2


def test_a_run_resumes_with_other_threads(toy, tmp_path, keep_threads):
    run_dir = tmp_path / "run"
    assert train(toy, run_dir, "train.max_steps=2", "data.test=[]") == 0
    assert train(toy, run_dir, "train.max_steps=4", "data.test=[]", "train.threads=2") == 0
    assert "resumed" in (run_dir / "train.log").read_text()
    assert "2 CPU threads" in (run_dir / "train.log").read_text().split("resumed")[1]
