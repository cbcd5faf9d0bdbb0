"""The `seq2seq` command line: parse arguments, load the config, call one function."""

from __future__ import annotations

import enum
import errno
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from seq2seq.errors import UserError
from seq2seq.train.interrupt import Interrupted

if TYPE_CHECKING:
    from seq2seq.decode.translate import LineTranslator

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Config-driven neural machine translation: train, translate, evaluate, sweep.",
)


def _read_lines(path: Path) -> list[str]:
    from seq2seq.data.corpus import read_lines

    return read_lines(path)


@app.command()
def train(
    config: Annotated[Path, typer.Option("--config", "-c", help="YAML run config")],
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", help="override a config field, e.g. --set train.max_steps=100"),
    ] = None,
    run_dir: Annotated[
        Path | None, typer.Option("--run-dir", file_okay=False, help="default: runs/<name>")
    ] = None,
    init_from: Annotated[
        str | None,
        typer.Option(help="fine-tune from a run directory or checkpoint (train.init_from)"),
    ] = None,
) -> None:
    """Train a model (or resume the run in --run-dir), then score the test sets."""
    from seq2seq.config import load_config
    from seq2seq.train.run import train as run_training

    cfg = load_config(config, overrides or [])
    if init_from is not None:  # a string as given: as YAML, a run named 2024 would be a number
        cfg.train.init_from = init_from
    run_training(cfg, run_dir or Path("runs") / cfg.name)


@app.command("config")
def show_config(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="YAML run config; default: none")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", help="override a field (repeatable), e.g. --set train.max_steps=100"),
    ] = None,
    as_markdown: Annotated[
        bool, typer.Option("--markdown", help="print the reference docs/configuration.md instead")
    ] = False,
) -> None:
    """Print a run config as training would read it: every field, defaults filled in, each
    commented with its description and allowed values. Without --config: the defaults."""
    import seq2seq.attention  # noqa: F401  (registers the attention types the schema lists)
    from seq2seq.config import load_config
    from seq2seq.config.reference import commented_yaml, markdown

    if as_markdown:
        if config or overrides:
            raise UserError("--markdown prints the reference of every field; drop --config/--set")
        print(markdown(), end="")
    elif config is None:
        if overrides:
            raise UserError("--set changes a config: pass the config too (--config FILE)")
        print(commented_yaml(), end="")
    else:
        print(commented_yaml(load_config(config, overrides or []).to_dict()), end="")


class Engine(str, enum.Enum):
    torch = "torch"
    ctranslate2 = "ctranslate2"


class Quantization(str, enum.Enum):
    float32 = "float32"
    int16 = "int16"
    int8 = "int8"


@app.command()
def translate(
    run: Annotated[
        Path,
        typer.Option(
            "--run", help="a trained run directory (--engine ctranslate2: an exported model)"
        ),
    ],
    checkpoint: Annotated[str, typer.Option(help="best, last, step-N or a .pt file")] = "best",
    input: Annotated[Path | None, typer.Option("--input", "-i", help="default: stdin")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="default: stdout")] = None,
    beam: Annotated[
        int | None, typer.Option(min=1, help="beam size, 1 = greedy; default: decode.beam")
    ] = None,
    nbest: Annotated[
        int, typer.Option(min=1, help="write the N best: LINE<TAB>SCORE<TAB>TEXT, N per line")
    ] = 1,
    length_penalty: Annotated[
        float | None, typer.Option(min=0.0, help="GNMT alpha; default: decode.length_penalty")
    ] = None,
    batch_tokens: Annotated[
        int | None, typer.Option(min=1, help="padded source tokens x beam per batch")
    ] = None,
    alignments: Annotated[
        Path | None, typer.Option(help="write Pharaoh word alignments (i-j), a line per input")
    ] = None,
    engine: Annotated[
        Engine, typer.Option(help="ctranslate2: a model that `seq2seq export` wrote")
    ] = Engine.torch,
) -> None:
    """Translate a file (or stdin) line by line; output stays line-aligned with input.

    Empty and blank lines give empty lines. A line that is not valid UTF-8 gives an empty
    line too, and a source longer than the model reads (twice data.max_len pieces) is cut
    to that; stderr counts and names such lines. On a terminal, stdin is translated
    interactively: one line in, one translation out.
    """
    from seq2seq.decode.line_io import translate_file, translate_interactively

    options = {"beam": beam, "length_penalty": length_penalty, "batch_tokens": batch_tokens}
    translator = _translator(engine, run, checkpoint, alignments, options)
    if nbest > translator.decode.beam:
        raise UserError(f"--nbest {nbest} needs a beam at least as wide; pass --beam {nbest}")
    if input is None and sys.stdin is None:
        raise UserError("stdin is closed: nothing to translate; pass --input FILE or pipe text in")
    if input is None and sys.stdin.isatty():
        if alignments or output:
            raise UserError("interactive translation writes to the terminal; pass --input FILE")
        translate_interactively(translator, nbest)
    else:
        translate_file(translator, input or Path("/dev/stdin"), output, nbest, alignments)


def _translator(
    engine: Engine, run: Path, checkpoint: str, alignments: Path | None, options: dict
) -> LineTranslator:
    from seq2seq.decode.translate import Translator

    if engine is Engine.torch:
        return Translator.load(run, checkpoint, **options)
    from seq2seq.decode.ctranslate2_engine import CTranslate2Translator

    if alignments is not None:
        raise UserError(
            "--alignments needs attention weights, which CTranslate2 does not "
            "return here; use --engine torch with the run directory"
        )
    if checkpoint != "best":
        raise UserError(
            "an exported model holds one checkpoint; pick it when exporting "
            "(seq2seq export --checkpoint) and leave out --checkpoint here"
        )
    return CTranslate2Translator.load(run, threads=_threads(), **options)


def _threads() -> int:
    import torch

    return torch.get_num_threads()  # the PyTorch engine's default: compare like with like


@app.command()
def export(
    run: Annotated[Path, typer.Option("--run", help="a trained Transformer run directory")],
    output: Annotated[Path, typer.Option("--output", "-o", help="a new directory")],
    quantization: Annotated[
        Quantization,
        typer.Option(help="weight type; int8 is smallest, and fastest on CPUs with VNNI"),
    ] = Quantization.float32,
    checkpoint: Annotated[str, typer.Option(help="best, last, step-N or a .pt file")] = "best",
) -> None:
    """Write a CTranslate2 model directory of a Transformer run whose attention is
    multi-head scaled dot-product (translate with it: --engine ctranslate2)."""
    from seq2seq.decode.export import export_ctranslate2

    export_ctranslate2(run, output, quantization.value, checkpoint)
    print(f"exported {run} to {output} ({quantization.value})", file=sys.stderr)


@app.command()
def evaluate(
    run: Annotated[Path, typer.Option("--run", help="a trained run directory")],
    src: Annotated[Path, typer.Option("--src", help="source sentences, one per line")],
    ref: Annotated[Path, typer.Option("--ref", help="reference translations, one per line")],
    checkpoint: Annotated[str, typer.Option(help="best, last, step-N or a .pt file")] = "best",
    beam: Annotated[
        int | None, typer.Option(min=1, help="beam size, 1 = greedy; default: decode.beam")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Translate --src and score it against --ref: BLEU and chrF with sacrebleu signatures."""
    from seq2seq.decode.translate import Translator
    from seq2seq.evaluate import score_corpus

    sources, references = _read_lines(src), _read_lines(ref)
    if len(sources) != len(references):
        raise UserError(
            f"{src} has {len(sources)} lines but {ref} has {len(references)}; "
            "give one reference per source line"
        )
    translator = Translator.load(run, checkpoint, beam=beam)
    scores = score_corpus(translator.translate(sources), references)
    print(json.dumps(scores.to_dict()) if as_json else str(scores))


@app.command()
def average(
    run: Annotated[Path, typer.Option("--run", help="a trained run directory")],
    last: Annotated[
        int | None, typer.Option(min=1, help="average the N latest step-N checkpoints")
    ] = None,
    checkpoints: Annotated[
        list[str] | None,
        typer.Option(
            "--checkpoints", help="one to average, repeated for each: step-N, best, last or FILE"
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="default: DIR/checkpoints/averaged.pt")
    ] = None,
) -> None:
    """Average checkpoint parameters into one checkpoint (translate --checkpoint averaged)."""
    from seq2seq.checkpoint import RunDir, average_checkpoints, save_checkpoint, step_checkpoints

    if (last is None) == (not checkpoints):
        raise UserError(
            "pass either --last N or --checkpoints NAME, once per checkpoint (one of the two)"
        )
    run_dir = RunDir(run)
    if checkpoints:
        paths = [run_dir.resolve_checkpoint(name) for name in checkpoints]
    else:
        available = step_checkpoints(run_dir)
        if len(available) < last:
            raise UserError(
                f"--last {last} asks for more step checkpoints than {run} has "
                f"({len(available)}; train.keep_best keeps that many); pass a smaller N"
            )
        paths = available[-last:]
    target = output or run_dir.checkpoint("averaged")
    save_checkpoint(target, average_checkpoints(paths))
    print(f"averaged {len(paths)} checkpoints into {target}", file=sys.stderr)


@app.command("plot-attention")
def plot_attention(
    run: Annotated[Path, typer.Option("--run", help="a trained run directory")],
    src: Annotated[str, typer.Option("--src", help="the source sentence to translate")],
    output: Annotated[Path, typer.Option("--output", "-o", help="PNG file")] = Path(
        "attention.png"
    ),
    checkpoint: Annotated[str, typer.Option(help="best, last, step-N or a .pt file")] = "best",
) -> None:
    """Translate one sentence and draw its attention heatmap (source x target pieces)."""
    from seq2seq.decode.translate import Translator
    from seq2seq.files import atomic_write_bytes
    from seq2seq.plots import attention_figure, figure_png

    amap = Translator.load(run, checkpoint).attention_map(src)
    if amap is None:
        raise UserError(
            f"the model of {run} finished no translation of this sentence (its outputs are "
            "not finite); use another --checkpoint"
        )
    figure = attention_figure(amap.weights, amap.src_pieces, amap.tgt_pieces)
    atomic_write_bytes(output, figure_png(figure))
    print(amap.translation)
    print(f"attention heatmap written to {output}", file=sys.stderr)


class Device(str, enum.Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


@app.command()
def serve(
    run: Annotated[Path, typer.Option("--run", help="a trained run directory")],
    checkpoint: Annotated[str, typer.Option(help="best, last, step-N or a .pt file")] = "best",
    host: Annotated[
        str, typer.Option(help="the address to listen on; 0.0.0.0 opens it to the network")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="0: any free port")] = 8000,
    device: Annotated[Device | None, typer.Option(help="default: the run's train.device")] = None,
    max_lines: Annotated[int, typer.Option(min=1, help="lines per request")] = 64,
    max_chars: Annotated[int, typer.Option(min=1, help="characters per line")] = 2000,
    timeout: Annotated[
        float, typer.Option(min=0.1, help="seconds a request may take, queueing included")
    ] = 60.0,
    max_queue: Annotated[
        int, typer.Option(min=1, help="requests that may wait; more get 503")
    ] = 256,
    batch_lines: Annotated[int, typer.Option(min=1, help="lines decoded together at most")] = 64,
    batch_wait_ms: Annotated[
        float, typer.Option(min=0.0, help="how long a batch waits for more requests")
    ] = 10.0,
) -> None:
    """Serve the model over HTTP: POST /translate, GET /health, GET /info, and a page at /
    that translates what you type and draws its attention. Stop with Ctrl-C or SIGTERM:
    requests in flight finish first."""
    from seq2seq.serve.schema import ServeLimits
    from seq2seq.serve.server import serve as run_server

    limits = ServeLimits(
        max_lines=max_lines,
        max_chars=max_chars,
        timeout=timeout,
        max_queue=max_queue,
        batch_lines=batch_lines,
        batch_wait=batch_wait_ms / 1000,
    )
    run_server(run, checkpoint, host, port, device.value if device else None, limits)


sweep_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
app.add_typer(sweep_app, name="sweep")


@sweep_app.callback(invoke_without_command=True)
def sweep(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="sweep file, e.g. configs/sweeps/demo.yaml"),
    ] = None,
    sweep_dir: Annotated[
        Path | None,
        typer.Option("--sweep-dir", file_okay=False, help="default: runs/sweeps/<name>"),
    ] = None,
    shard: Annotated[
        str | None, typer.Option(help="i/n: run only the i-th of n disjoint shares of the runs")
    ] = None,
) -> None:
    """Train every cell of a grid x seeds (skipping finished runs, resuming interrupted
    ones), then write the report to DIR/report; `seq2seq sweep report DIR` rewrites it."""
    if ctx.invoked_subcommand is not None:
        if config or sweep_dir or shard:
            raise UserError("'seq2seq sweep report DIR' takes no options; pass only DIR")
        return
    if config is None:
        raise UserError(
            "pass --config SWEEP_FILE (see configs/sweeps/), or: seq2seq sweep report DIR"
        )
    from seq2seq.sweep import load_sweep, parse_shard, run_sweep

    plan = load_sweep(config)
    part = parse_shard(shard) if shard else None
    report = run_sweep(plan, sweep_dir or Path("runs/sweeps") / plan.name, part)
    print(report.read_text(encoding="utf-8"), end="")


@sweep_app.command("report")
def sweep_report(
    directory: Annotated[Path, typer.Argument(help="a sweep directory (holds sweep.yaml)")],
) -> None:
    """Write DIR/report from the sweep's finished runs; list those not finished."""
    from seq2seq.sweep import SweepDir, write_report

    print(write_report(SweepDir(directory)).read_text(encoding="utf-8"), end="")


def _os_problem(error: OSError) -> str:
    where = f"{error.filename}: " if error.filename else ""
    return f"{where}{error.strerror or error}; check the path and its permissions"


def main(argv: list[str] | None = None) -> None:
    """Entry point: bad input of any kind is one line on stderr and exit status 2."""
    command = typer.main.get_command(app)
    args = sys.argv[1:] if argv is None else argv
    try:
        code = command.main(args=args or ["--help"], prog_name="seq2seq", standalone_mode=False)
    except UserError as error:
        print(f"seq2seq: error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except Interrupted as stop:
        print(f"seq2seq: {stop}", file=sys.stderr)
        sys.exit(stop.exit_code)
    except typer.Abort:
        print("seq2seq: interrupted", file=sys.stderr)
        sys.exit(130)
    except OSError as error:  # the file system refused: one line, never a traceback
        print(f"seq2seq: error: {_os_problem(error)}", file=sys.stderr)
        sys.exit(1 if error.errno in (errno.ENOSPC, errno.EDQUOT) else 2)
    except typer.TyperException as error:  # usage errors: unknown options, bad values
        ctx = getattr(error, "ctx", None)
        where = ctx.command_path if ctx else "seq2seq"
        message = error.format_message().rstrip(".")
        print(f"seq2seq: error: {message}; see '{where} --help'", file=sys.stderr)
        sys.exit(2)
    sys.exit(code or 0)
