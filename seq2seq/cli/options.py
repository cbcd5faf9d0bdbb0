"""Options that several commands share, spelled and explained once."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer


class Engine(str, enum.Enum):
    torch = "torch"
    ctranslate2 = "ctranslate2"


class Quantization(str, enum.Enum):
    float32 = "float32"
    int16 = "int16"
    int8 = "int8"


class Device(str, enum.Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


def device_name(choice: Device | None) -> str | None:
    """The device a command was given, as the decoders take it (None: the run's own)."""
    return choice.value if choice else None


# A run's config, as `seq2seq train CONFIG` or `--config CONFIG`, and its run directory.
ConfigArgument = Annotated[
    Path | None, typer.Argument(metavar="CONFIG", help="YAML run config", show_default=False)
]
ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML run config (or give it as CONFIG)")
]
RunDirOption = Annotated[
    Path | None, typer.Option("--run-dir", file_okay=False, help="default: runs/<name>")
]
Checkpoint = Annotated[
    str,
    typer.Option(
        metavar="CHECKPOINT",
        help="best, last, step-N, a .pt file, or init (the weights before the first update)",
    ),
]
# Decoding with several models: their ensemble (docs/decoding.md#ensembles).
Runs = Annotated[
    list[Path] | None,
    typer.Option(
        "--run",
        metavar="RUN",
        help="a trained run directory; repeat it to decode with an ensemble of runs",
    ),
]
Checkpoints = Annotated[
    list[str] | None,
    typer.Option(
        "--checkpoint",
        metavar="CHECKPOINT",
        help="best (the default), last, step-N, a .pt file, or init; repeat it for an "
        "ensemble: of one --run's checkpoints, or one per --run",
    ),
]
References = Annotated[
    list[Path] | None,
    typer.Option(
        "--ref",
        metavar="FILE",
        help="reference translations, one per line; repeat it for more references",
    ),
]


NBestLines = Annotated[
    int, typer.Option(min=1, help="write the N best: LINE<TAB>SCORE<TAB>TEXT, N per line")
]
EngineChoice = Annotated[
    Engine, typer.Option(help="ctranslate2: a model that `seq2seq export` wrote")
]
GivenTranslations = Annotated[
    list[Path] | None,
    typer.Option(
        "--hyp",
        metavar="FILE",
        help="score this translation instead (no model); repeat it to compare the others "
        "with the first",
    ),
]
AttentionFile = Annotated[
    Path | None,
    typer.Option(
        "--attention",
        metavar="FILE",
        help="write each best translation's attention weights and pieces, a JSON line per "
        "input line (null for a blank one)",
    ),
]
PrefixFile = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE",
        help="target prefixes, a line per input line (empty: none), that each output starts "
        "with verbatim and decodes on from",
    ),
]
AlignmentFile = Annotated[
    Path | None,
    typer.Option("--alignments", help="write Pharaoh word alignments (i-j), a line per input"),
]
AlignmentHead = Annotated[
    int | None,
    typer.Option(
        min=0,
        metavar="H",
        help="with --alignments: link each target piece by head H's attention (from 0), not "
        "the heads' mean",
    ),
]
TokenScoreFile = Annotated[
    Path | None,
    typer.Option(
        "--token-scores",
        metavar="FILE",
        help="write the pieces of each line's (best) translation and the log-probability of "
        "each, a JSON line per input line",
    ),
]
ConstraintFile = Annotated[
    Path | None,
    typer.Option(
        "--constraints",
        metavar="FILE",
        help="lexical constraints, a line per input line: the phrases (tab-separated; empty: "
        "none) that each output must contain (needs --beam 2 or more)",
    ),
]
DeviceChoice = Annotated[
    Device | None, typer.Option(help="where to compute; default: the run's train.device")
]
Threads = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="CPU threads; default: before each batch, the CPUs this process may use that "
        "other programs leave free (docs/troubleshooting.md)",
    ),
]
Int8 = Annotated[
    bool,
    typer.Option(
        "--int8",
        help="decode with int8 weights on the CPU: about 1.5-2x faster, BLEU within a few "
        "tenths (docs/decoding.md)",
    ),
]
Overrides = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="FIELD=VALUE",
        help="override a config field; repeat it for more: --set train.max_steps=100",
    ),
]


@dataclass(frozen=True)
class Loading:
    """Which checkpoints a command's translator loads, and where it computes (`score`)."""

    checkpoint: Checkpoints = None
    device: DeviceChoice = None
    threads: Threads = None


@dataclass(frozen=True)
class DecodingLoading(Loading):
    """`Loading`, and whether decoding's weights are int8 (`evaluate`)."""

    int8: Int8 = False


@dataclass(frozen=True)
class EngineLoading(DecodingLoading):
    """`DecodingLoading`, and which engine decodes (`translate`)."""

    engine: EngineChoice = Engine.torch


@dataclass(frozen=True)
class Records:
    """What a command writes beside its output, a line per input line."""

    alignments: AlignmentFile = None
    alignment_head: AlignmentHead = None
    attention: AttentionFile = None
    token_scores: TokenScoreFile = None


@dataclass(frozen=True)
class ServeLimitOptions:
    """How much `serve` lets one request ask and take, and how it batches them."""

    max_lines: Annotated[int, typer.Option(min=1, help="lines per request")] = 64
    max_chars: Annotated[int, typer.Option(min=1, help="characters per line")] = 2000
    timeout: Annotated[
        float, typer.Option(min=0.1, help="seconds a request may take, queueing included")
    ] = 60.0
    max_queue: Annotated[int, typer.Option(min=1, help="requests that may wait; more get 503")] = (
        256
    )
    batch_lines: Annotated[int, typer.Option(min=1, help="lines decoded together at most")] = 64
    batch_wait_ms: Annotated[
        float, typer.Option(min=0.0, help="how long a batch waits for more requests")
    ] = 10.0
    read_timeout: Annotated[
        float, typer.Option(min=0.1, help="seconds a client may take to send headers, or body")
    ] = 10.0
