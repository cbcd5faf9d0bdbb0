"""`score`: the model's log-probability of given translations (forced decoding)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.app import app
from seq2seq.cli.options import (
    BatchTokens,
    Checkpoints,
    DeviceChoice,
    Engine,
    LengthPenalty,
    Runs,
    Threads,
)
from seq2seq.errors import UserError


@app.command()
def score(
    run: Runs,
    src: Annotated[Path, typer.Option("--src", help="source sentences, one per line")],
    ref: Annotated[Path, typer.Option("--ref", help="their translations to score, line-aligned")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="default: stdout")] = None,
    checkpoint: Checkpoints = None,
    length_penalty: LengthPenalty = None,
    batch_tokens: BatchTokens = None,
    device: DeviceChoice = None,
    threads: Threads = None,
) -> None:
    """Score each translation in --ref as the model's log-probability of it given its
    source in --src: a line per pair, LOGPROB<TAB>PER_TOKEN<TAB>NORMALISED (the total, EOS
    included; over the tokens; over the length penalty, as beam search ranks). Several
    --run or --checkpoint: an ensemble, whose log-probability is the mean of its models'."""
    # Here, not at the top: importing translation.py first would register its commands
    # before training.py's.
    from seq2seq.cli.translation import _read_lines, _translator, _within_memory
    from seq2seq.files import atomic_write_text

    sources, references = _read_lines(src), _read_lines(ref)
    if len(sources) != len(references):
        raise UserError(
            f"{src} has {len(sources)} lines but {ref} has {len(references)}; "
            "give one translation per source line"
        )
    options = {"length_penalty": length_penalty, "batch_tokens": batch_tokens}
    with _within_memory(None, batch_tokens):
        translator = _translator(Engine.torch, run, checkpoint, device, threads, None, options)
        scores = translator.score(sources, references, progress=True)
    text = "".join(f"{s.log_prob:.4f}\t{s.per_token:.4f}\t{s.normalised:.4f}\n" for s in scores)
    if output is None:
        sys.stdout.write(text)
    else:
        atomic_write_text(output, text)
