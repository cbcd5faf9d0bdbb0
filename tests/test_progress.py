"""Progress where a person watches: bars on a terminal, nothing in a pipe; TensorBoard gets
the config, its hyperparameters and validation translations as text."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

from cli_helpers import run_cli
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def translate_40_lines(run, tmp_path, stderr) -> subprocess.CompletedProcess:
    source = tmp_path / "in.txt"
    source.write_text("boka mimi toto\n" * 40)
    command = [sys.executable, "-m", "seq2seq", "translate", "--run", str(run),
               "-i", str(source), "-o", str(tmp_path / "out.txt")]  # fmt: skip
    return subprocess.run(command, stderr=stderr, check=True, timeout=120)


def test_translate_shows_a_bar_on_a_terminal_and_nothing_in_a_pipe(trained, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("boka mimi toto\n" * 40)
    # Here, stderr is pytest's capture: no terminal.
    assert run_cli("translate", "--run", trained, "-i", source, "-o", tmp_path / "out.txt") == 0
    assert capsys.readouterr().err == ""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))  # 100 wide
    shown = b""
    try:
        translate_40_lines(trained, tmp_path, follower)
        os.close(follower)
        while chunk := _read(leader):
            shown += chunk
    finally:
        os.close(leader)
    assert b"40/40" in shown and b"sent/s" in shown


def _read(terminal: int) -> bytes:
    try:
        return os.read(terminal, 65536)
    except OSError:  # the other end closed
        return b""


def test_tensorboard_has_the_config_its_hparams_heatmaps_and_validation_translations(trained):
    everything = {"tensors": 0, "images": 0}
    events = EventAccumulator(str(trained / "tensorboard"), size_guidance=everything)
    events.Reload()
    tags = events.Tags()["tensors"]
    assert "config/text_summary" in tags and "valid/translations/text_summary" in tags
    config = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "attention:" in config and "type: bahdanau" in config
    shown = events.Tensors("valid/translations/text_summary")
    assert [event.step for event in shown] == [10, 20, 30]  # every validation
    assert "| source | reference | translation |" in shown[-1].tensor_proto.string_val[0].decode()
    heatmaps = events.Images("attention/0")
    assert [event.step for event in heatmaps] == [10, 20, 30]
    assert heatmaps[0].encoded_image_string.startswith(b"\x89PNG")
    hparams = events.PluginTagToContent("hparams")
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= set(hparams)
    assert b"model.attention.type" in hparams["_hparams_/session_start_info"]
    assert b"valid/bleu" in hparams["_hparams_/experiment"]
