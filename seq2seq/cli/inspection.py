"""`seq2seq inspect`: the attention diagnostics of a trained run on sentence pairs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.app import app
from seq2seq.cli.decoding import decoding_options
from seq2seq.cli.options import Checkpoint, DeviceChoice, device_name


@app.command("inspect")
@decoding_options(("batch_tokens", "tgt_lang"))
def inspect_run(
    run: Annotated[Path, typer.Option("--run", help="a trained run directory")],
    src: Annotated[Path, typer.Option("--src", help="source sentences, one per line")],
    ref: Annotated[Path, typer.Option("--ref", help="their translations, line-aligned")],
    checkpoint: Checkpoint = "best",
    device: DeviceChoice = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    *,
    decode: dict,
) -> None:
    """Print the attention diagnostics of a run's checkpoint on sentence pairs: per
    attention module and head, entropy, saturation, energies, query and key norms, sink
    mass and learned scales, over the teacher-forced pass (docs/attention.md)."""
    from seq2seq.data.corpus import read_lines
    from seq2seq.decode.inspection import diagnostics_table
    from seq2seq.decode.translate import Translator

    sources, references = read_lines(src), read_lines(ref)
    translator = Translator.load(run, checkpoint, device_name(device), **decode)
    found = translator.attention_diagnostics(sources, references)
    if as_json:
        print(json.dumps(_finite(found), allow_nan=False))
        return
    skipped = f", {len(found['skipped'])} with a blank side skipped" if found["skipped"] else ""
    origin = translator.origin
    weights = origin.checkpoint or f"{origin.run}, its initial weights (seed {origin.config.seed})"
    print(f"{weights}: {found['pairs']} sentence pairs{skipped}\n")
    print(diagnostics_table(found["sites"]))


def _finite(value: object) -> object:
    """`value` with NaN and infinities as None: strict JSON parsers refuse them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
