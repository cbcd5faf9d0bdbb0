"""Commands that use a trained run: `translate`, `evaluate`, `export`, `plot-attention`
and `serve`; and `import`, which makes one of a published model."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from seq2seq.cli.app import app
from seq2seq.cli.decoding import cli_spelling, decoding_options, flag
from seq2seq.cli.option_groups import option_group
from seq2seq.cli.options import (
    Checkpoint,
    ConstraintFile,
    DeviceChoice,
    Engine,
    EngineLoading,
    Loading,
    NBestLines,
    PrefixFile,
    Quantization,
    Records,
    ServeLimitOptions,
    Threads,
    device_name,
)
from seq2seq.errors import UserError

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from seq2seq.decode.line_translator import LineTranslator


def _read_lines(path: Path) -> list[str]:
    from seq2seq.data.corpus import read_lines

    return read_lines(path)


def _within_memory(decode: dict) -> AbstractContextManager[None]:
    """Loading a model and decoding with it: running out of memory is one line saying what
    to lower (the options given, or the run's decode section)."""
    from seq2seq.device import out_of_memory_reported

    given = ", ".join(
        f"{flag(name)} {decode[name]}" for name in ("beam", "batch_tokens") if name in decode
    )
    return out_of_memory_reported(
        lambda: (
            f"out of memory while translating{f' ({given})' if given else ''}; lower "
            "--beam or --batch-tokens (default: the run's decode section), or use a device with "
            "more memory"
        )
    )


# `translate` needs --run (evaluate may score a --hyp without one), and runs exported models too.
TranslateRuns = Annotated[
    list[Path],
    typer.Option(
        "--run",
        metavar="RUN",
        help="a trained run directory (--engine ctranslate2: an exported model); repeat it "
        "to decode with an ensemble of runs",
    ),
]


@app.command()
@decoding_options()
@option_group("records", Records)
@option_group("loading", EngineLoading)
def translate(
    run: TranslateRuns,
    input: Annotated[Path | None, typer.Option("--input", "-i", help="default: stdin")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="default: stdout")] = None,
    nbest: NBestLines = 1,
    prefix_file: PrefixFile = None,
    constraint_file: ConstraintFile = None,
    *,
    loading: EngineLoading,
    records: Records,
    decode: dict,
) -> None:
    """Translate a file (or stdin) line by line; output stays line-aligned with input.

    Blank lines and lines that are not valid UTF-8 give empty lines, and a source longer
    than the model reads (twice data.max_len pieces) is cut to that; stderr counts and
    names such lines. On a terminal, stdin is translated interactively, line by line."""
    with _within_memory(decode):
        translator = _translator(run, loading, records.alignments or records.attention, decode)
        files = (records.alignments, records.attention, records.token_scores)
        files += (records.alignment_head,)
        _translate_input(translator, input, output, nbest, files, (prefix_file, constraint_file))


def _translate_input(
    translator: LineTranslator,
    input: Path | None,
    output: Path | None,
    nbest: int,
    records: tuple[Path | None, Path | None, Path | None, int | None],
    guides: tuple[Path | None, Path | None],
) -> None:
    """Translate a file, piped stdin or a terminal session; `records`: the files to write
    beside the translations (`line_io.RecordFiles`); `guides`: those of the prefixes and
    of the constraints."""
    from seq2seq.config.decode import call_problem
    from seq2seq.decode.line_io import RecordFiles, translate_file, translate_interactively

    problem = call_problem(translator.decode, nbest, guides[1] is not None, cli_spelling)
    if problem is not None:
        raise UserError(problem)
    if input is None and sys.stdin is None:
        raise UserError("stdin is closed: nothing to translate; pass --input FILE or pipe text in")
    if input is None and sys.stdin.isatty():
        if any(record is not None for record in records) or output:
            raise UserError("interactive translation writes to the terminal; pass --input FILE")
        for option, file in zip(("--prefix-file", "--constraints"), guides, strict=True):
            if file is not None:
                raise UserError(f"{option} pairs its lines with an input file's; pass --input FILE")
        translate_interactively(translator, nbest)
    else:
        source = input or Path("/dev/stdin")
        translate_file(translator, source, output, nbest, RecordFiles(*records), guides)


def _translator(
    runs: list[Path], loading: Loading, weights: Path | None, options: dict
) -> LineTranslator:
    """The translator of `runs` (or of an exported model: `EngineLoading.engine`);
    `weights`: a file of attention weights or alignments to write, which the CTranslate2
    engine cannot."""
    from seq2seq.decode.translate import Translator
    from seq2seq.device import free_cpus, use_threads

    where, threads, int8 = (
        device_name(loading.device),
        loading.threads,
        getattr(loading, "int8", False),
    )
    checkpoints = loading.checkpoint
    if getattr(loading, "engine", Engine.torch) is Engine.torch:
        return Translator.load(
            runs, checkpoints or "best", where, threads=threads, int8=int8, **options
        )
    from seq2seq.decode.ctranslate2_engine import CTranslate2Translator

    if len(runs) > 1:
        raise UserError(
            "--engine ctranslate2 decodes one exported model, not an ensemble; decode an "
            "ensemble of run directories with --engine torch"
        )
    if int8:
        raise UserError(
            "--int8 quantizes a run's model as it loads; an exported model has its weight "
            "type already: export it with --quantization int8 and leave out --int8 here"
        )
    if weights is not None:
        raise UserError(
            "--alignments and --attention need attention weights, which CTranslate2 does "
            "not return here; use --engine torch with the run directory"
        )
    if checkpoints not in (None, ["best"]):
        raise UserError(
            "an exported model holds one checkpoint; pick it when exporting "
            "(seq2seq export --checkpoint) and leave out --checkpoint here"
        )
    # CTranslate2 keeps its threads: as many as are free as it loads
    count = free_cpus() if threads is None else use_threads(threads)
    return CTranslate2Translator.load(runs[0], where or "cpu", threads=count, **options)


@app.command()
def export(
    run: Annotated[Path, typer.Option("--run", help="a trained Transformer run directory")],
    output: Annotated[Path, typer.Option("--output", "-o", help="a new directory")],
    quantization: Annotated[
        Quantization,
        typer.Option(help="weight type; int8 is smallest, and fastest on CPUs with VNNI"),
    ] = Quantization.float32,
    checkpoint: Checkpoint = "best",
) -> None:
    """Write a CTranslate2 model directory of a Transformer run whose attention is
    multi-head scaled dot-product (translate with it: --engine ctranslate2)."""
    from seq2seq.export import export_ctranslate2

    export_ctranslate2(run, output, quantization.value, checkpoint)
    print(f"exported {run} to {output} ({quantization.value})", file=sys.stderr)


@app.command("import")
def import_model(
    source: Annotated[
        Path,
        typer.Option(
            "--from",
            file_okay=False,
            help="a Marian model in the Hugging Face format (config.json, the weights, "
            "source.spm, target.spm, vocab.json): its directory, or its hub name "
            "(Helsinki-NLP/opus-mt-de-en) where huggingface_hub and the network allow",
        ),
    ],
    run_dir: Annotated[Path, typer.Option("--run-dir", help="the new run directory")],
    src: Annotated[str, typer.Option("--src", metavar="LANG", help="its source language, e.g. de")],
    tgt: Annotated[str, typer.Option("--tgt", metavar="LANG", help="its target language, e.g. en")],
) -> None:
    """Write a published Marian model (OPUS-MT) as a run directory, which translates,
    serves, exports and fine-tunes (--init-from) as a trained one
    (docs/trained-models.md#import-an-opus-mt-model)."""
    from seq2seq.importing import import_marian

    cfg = import_marian(source, run_dir, src, tgt)
    model = cfg.model
    print(
        f"imported {source} into {run_dir}: a Transformer of {model.encoder_layers}+"
        f"{model.decoder_layers} layers, d_model {model.hidden_dim}",
        file=sys.stderr,
    )


@app.command("plot-attention")
@decoding_options(("tgt_lang", "tag"))
def plot_attention(
    run: Annotated[Path, typer.Option("--run", help="a trained run directory")],
    src: Annotated[
        str, typer.Option("--src", metavar="SENTENCE", help="the source sentence to translate")
    ],
    ref: Annotated[
        str | None,
        typer.Option(
            "--ref",
            metavar="SENTENCE",
            help="draw the attention over this translation instead of the model's own",
        ),
    ] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="PNG file")] = Path(
        "attention.png"
    ),
    checkpoint: Checkpoint = "best",
    device: DeviceChoice = None,
    *,
    decode: dict,
) -> None:
    """Translate one sentence and draw its attention heatmap (source x target pieces)."""
    from seq2seq.decode.translate import Translator
    from seq2seq.files import atomic_write_bytes
    from seq2seq.plots import attention_figure, figure_png

    with _within_memory(decode):
        translator = Translator.load(run, checkpoint, device_name(device), **decode)
        amap = translator.attention_map(src, ref)
    if amap is None:
        raise UserError(
            f"the model of {run} finished no translation of this sentence (its outputs are "
            "not finite); use another --checkpoint"
        )
    figure = attention_figure(amap.weights, amap.src_pieces, amap.tgt_pieces)
    atomic_write_bytes(output, figure_png(figure))
    print(amap.translation)
    print(f"attention heatmap written to {output}", file=sys.stderr)


@app.command()
@decoding_options()
@option_group("limits", ServeLimitOptions)
def serve(
    run: Annotated[Path, typer.Option("--run", help="a trained run directory")],
    checkpoint: Checkpoint = "best",
    host: Annotated[
        str,
        typer.Option(
            metavar="ADDRESS", help="the address to listen on; 0.0.0.0 opens it to the network"
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="0: any free port")] = 8000,
    device: DeviceChoice = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME", help="a name the Host header may give besides --host (repeat; * any)"
        ),
    ] = None,
    threads: Threads = None,
    *,
    limits: ServeLimitOptions,
    decode: dict,
) -> None:
    """Serve the model over HTTP: POST /translate, GET /health, GET /info, and a page at /
    that translates what you type and draws its attention. Stop with Ctrl-C or SIGTERM:
    requests in flight finish first."""
    from seq2seq.serve.schema import ServeLimits
    from seq2seq.serve.server import Served
    from seq2seq.serve.server import serve as run_server

    given = dataclasses.asdict(limits)
    given["batch_wait"] = given.pop("batch_wait_ms") / 1000
    served = Served(run, checkpoint, device_name(device), threads, decode)
    run_server(served, host, port, ServeLimits(**given), allowed_host or ())
