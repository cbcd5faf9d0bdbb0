"""What the bad-input tests build their commands from: a run, files, corpora, checkpoints.

Each builder takes the `Given` of one row of tests/test_bad_input.py and returns what the
row passes on (a path, an override, an exit status).
"""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest
import torch
import yaml
from cli_helpers import run_cli, train


@dataclass
class Given:
    """What a row builds its command from; the trained run is made only if a row asks."""

    request: pytest.FixtureRequest
    capsys: pytest.CaptureFixture
    tmp: Path

    @property
    def toy(self) -> Path:
        return self.request.getfixturevalue("toy")

    @property
    def trained(self) -> Path:
        run = self.request.getfixturevalue("trained")
        self.capsys.readouterr()  # its training log, if made just now, is not the row's output
        return run

    def file(self, name: str, data: bytes | str) -> Path:
        path = self.tmp / name
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return path

    def corpus(self, src: bytes, tgt: bytes) -> str:
        """data.train=PREFIX for a corpus of these two sides."""
        self.file("x.src", src)
        self.file("x.tgt", tgt)
        return f"data.train={self.tmp / 'x'}"

    def run_copy(self, edit_config: Callable[[dict], None] | None = None) -> Path:
        """A copy of the trained run, its config.yaml edited by `edit_config`."""
        copy = self.tmp / "copy"
        shutil.copytree(self.trained, copy)
        if edit_config is not None:
            config = yaml.safe_load((copy / "config.yaml").read_text())
            edit_config(config)
            (copy / "config.yaml").write_text(yaml.safe_dump(config))
        return copy

    def translate(self, *args: object) -> int:
        """`translate` of the trained run on a one-line input, with ARGS."""
        source = self.file("in.txt", "toto tape\n")
        return run_cli("translate", "--run", self.trained, "-i", source, *args)


def train_with(*overrides: str) -> Callable[[Given], int]:
    return lambda g: train(g.toy, g.tmp / "run", *overrides)


def set_hidden_dim(config: dict) -> None:
    config["model"]["hidden_dim"] = 8


def pickled(g: Given) -> Path:
    path = g.tmp / "evil.pt"
    torch.save({"model": {"w": PurePosixPath("x")}}, path)  # any class outside the allowlist
    return path


def truncated(g: Given) -> Path:
    return g.file("cut.pt", (g.trained / "checkpoints/best.pt").read_bytes()[:200])


def no_parameters(g: Given) -> Path:
    path = g.tmp / "none.pt"
    torch.save({"step": torch.tensor(3)}, path)
    return path


def foreign(g: Given) -> Path:
    path = g.tmp / "foreign.pt"
    torch.save({"model": {"w": torch.zeros(2)}}, path)
    return path


def no_checkpoint_yet(g: Given) -> Path:
    run = g.tmp / "fresh"
    run.mkdir()
    (run / "config.yaml").write_text((g.toy / "run.yaml").read_text())
    return run


def raw_pickle(g: Given) -> Path:
    return g.file("raw.pt", pickle.dumps({"model": {"w": [1.0]}}))


def other_tokenizer(g: Given) -> Path:
    """A checkpoint of the trained run's shapes that records another tokenizer."""
    state = torch.load(g.trained / "checkpoints/best.pt", weights_only=True)
    path = g.tmp / "other.pt"
    torch.save({**state, "tokenizer": "0123456789abcdef"}, path)
    return path


def corpus_directory(g: Given) -> str:
    (g.tmp / "d/x.src").mkdir(parents=True)
    return f"data.train={g.tmp / 'd/x'}"


def corpus_fifo(g: Given) -> str:
    """A corpus whose source side is a FIFO (read once, then empty)."""
    (g.tmp / "f").mkdir()
    os.mkfifo(g.tmp / "f/x.src")
    (g.tmp / "f/x.tgt").write_text("a\n")
    return f"data.train={g.tmp / 'f/x'}"


def alias_bomb() -> str:
    """425 bytes that expand to millions of strings once read as plain data."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    return "\n".join(lines) + "\ndata: *a7\n"
