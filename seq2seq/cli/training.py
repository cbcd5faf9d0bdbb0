"""Commands that train: `train`, `prepare`, `distill`, `config`, `average` and `sweep`."""

from __future__ import annotations

import enum
import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.app import HELP, app
from seq2seq.cli.decoding import decoding_options
from seq2seq.cli.option_groups import option_group
from seq2seq.cli.options import (
    Checkpoints,
    ConfigArgument,
    ConfigOption,
    Overrides,
    RunDirOption,
)
from seq2seq.errors import UserError


@app.command()
def train(
    config_file: ConfigArgument = None,
    config: ConfigOption = None,
    overrides: Overrides = None,
    run_dir: RunDirOption = None,
    init_from: Annotated[
        str | None,
        typer.Option(
            metavar="PATH", help="fine-tune from a run directory or checkpoint (train.init_from)"
        ),
    ] = None,
) -> None:
    """Train a model (or resume the run in --run-dir), then score the test sets:
    seq2seq train CONFIG [--set FIELD=VALUE ...]."""
    cfg = _run_config("train", config_file, config, overrides)  # a bad one: before torch loads
    from seq2seq.train.run import train as run_training

    if init_from is not None:  # a string as given: as YAML, a run named 2024 would be a number
        cfg.train.init_from = init_from
    run_training(cfg, run_dir or Path("runs") / cfg.name)


@app.command()
def prepare(
    config_file: ConfigArgument = None,
    config: ConfigOption = None,
    overrides: Overrides = None,
    run_dir: RunDirOption = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="print what data.filters would drop of the first --pairs pairs of each "
            "training corpus, and write nothing",
        ),
    ] = False,
    pairs: Annotated[
        int, typer.Option(min=1, help="the pairs of each corpus --dry-run cleans")
    ] = 100_000,
) -> None:
    """Clean the training corpora (data.filters), train the tokenizer and prepare the
    corpora of a run ahead of training, e.g. once before torchrun starts many processes:
    seq2seq prepare CONFIG [--set ...]; --dry-run shows what cleaning would drop."""
    cfg = _run_config("prepare", config_file, config, overrides)
    if dry_run:
        from seq2seq.data.cleaning import dry_run as clean_a_sample

        warn = functools.partial(print, "warning:", file=sys.stderr)
        for report in clean_a_sample(cfg.data, pairs, warn):
            print(report.table())
        return
    from seq2seq.train.run import prepare as prepare_run

    directory = run_dir or Path("runs") / cfg.name
    data = prepare_run(cfg, directory)
    samples = len(data.train.samples)
    sampled = f" and {samples} sampled segmentations of them" if samples else ""
    print(
        f"prepared {len(data.train)} training pairs{sampled} in {directory / 'tokenizer'}; "
        f"train with: seq2seq train CONFIG (same --set and --run-dir)",
        file=sys.stderr,
    )


@dataclass(frozen=True)
class Distillation:
    """Who teaches and how the distilled corpora are made and used (`seq2seq distill`)."""

    teachers: Annotated[
        list[Path],
        typer.Option(
            "--teacher",
            metavar="RUN",
            help="a trained run that translates the student's training corpora; repeat it "
            "for an ensemble",
        ),
    ]
    checkpoint: Checkpoints = None
    jobs: Annotated[int, typer.Option(min=1, help="processes that translate")] = 1
    original: Annotated[
        float | None,
        typer.Option(
            "--original-weight",
            min=0,
            help="train on the original pairs too, each corpus at this weight times its "
            "data.weights (default: on the distilled pairs alone)",
        ),
    ] = None
    out: Annotated[
        Path | None,
        typer.Option(
            file_okay=False, help="where the distilled corpora go (default: beside each corpus)"
        ),
    ] = None
    no_train: Annotated[
        bool, typer.Option("--no-train", help="make the distilled corpora, train nothing")
    ] = False


@app.command()
@option_group("how", Distillation)
@decoding_options()
def distill(
    config_file: ConfigArgument = None,
    config: ConfigOption = None,
    overrides: Overrides = None,
    run_dir: RunDirOption = None,
    *,
    how: Distillation,
    decode: dict,
) -> None:
    """Sequence-level knowledge distillation: the teacher translates the sources of the
    student config's training corpora (resumable: run it again to go on), then the student
    trains on them: seq2seq distill --teacher RUN CONFIG [--beam N] [--jobs N]
    (docs/training.md#distillation)."""
    cfg = _run_config("distill", config_file, config, overrides)
    from seq2seq.train.distilled_corpus import Teachers, distill, planned, student_config
    from seq2seq.train.logs import setup_logging
    from seq2seq.train.run import train as run_training

    checkpoints = tuple(how.checkpoint or ["best"])
    teachers = Teachers(tuple(how.teachers), checkpoints, tuple(decode.items()))
    plan = planned(cfg, teachers, how.out)
    # Checked before the translation: a bad student config costs no teacher time.
    student = None if how.no_train else student_config(cfg, plan, how.original)
    distill(plan, teachers, how.jobs, setup_logging())
    if student is not None:
        run_training(student, run_dir or Path("runs") / cfg.name)


def _run_config(command: str, config_file: Path | None, config: Path | None, overrides):
    """The run config given as CONFIG or --config, with its --set overrides."""
    from seq2seq.config import load_config

    if config_file and config and config_file != config:
        raise UserError(f"two configs given ({config_file} and --config {config}); pass one")
    if not (config_file or config):
        raise UserError(f"pass the run config: seq2seq {command} CONFIG (e.g. configs/demo.yaml)")
    return load_config(config_file or config, overrides or [])


@app.command("config")
def show_config(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="YAML run config; default: none")
    ] = None,
    overrides: Overrides = None,
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


@app.command()
def average(
    run: Annotated[Path, typer.Option("--run", help="a trained run directory")],
    last: Annotated[
        int | None, typer.Option(min=1, help="average the N latest step-N checkpoints")
    ] = None,
    checkpoints: Annotated[
        list[str] | None,
        typer.Option(
            "--checkpoints",
            metavar="CHECKPOINT",
            help="one to average, repeated for each: step-N, best, last or FILE",
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


class Launcher(str, enum.Enum):
    LOCAL = "local"  # submitit's local executor: processes on this machine, for testing
    SLURM = "slurm"


Jobs = Annotated[
    int | None, typer.Option(help="train up to N runs at once on this machine, a process each")
]
JobsPerGpu = Annotated[
    int | None, typer.Option(metavar="K", help="with GPUs: K runs at once on each")
]
LauncherOption = Annotated[
    Launcher | None,
    typer.Option("--launcher", help="submit the runs as jobs through submitit (the slurm extra)"),
]
SlurmSettings = Annotated[
    list[str] | None,
    typer.Option(metavar="KEY=VALUE", help="a Slurm job setting, repeated for each"),
]


@dataclass(frozen=True)
class SweepExecution:
    """How a sweep's runs are trained: one after another, at once on this machine
    (`--jobs`), or submitted as jobs (`--launcher`)."""

    jobs: Jobs = None
    jobs_per_gpu: JobsPerGpu = None
    launcher: LauncherOption = None
    slurm: SlurmSettings = None

    def given(self) -> bool:
        return any(getattr(self, name) for name in ("jobs", "jobs_per_gpu", "launcher", "slurm"))

    def check(self) -> None:
        """One line for options that do not go together."""
        for name, value in (("--jobs", self.jobs), ("--jobs-per-gpu", self.jobs_per_gpu)):
            if value is not None and value < 1:
                raise UserError(f"{name} {value}: give how many runs to train at once, 1 or more")
        if self.launcher is not None and (self.jobs or self.jobs_per_gpu):
            raise UserError(
                "--jobs trains runs at once on this machine, --launcher submits them as jobs; "
                "pass one of the two"
            )
        if self.slurm and self.launcher is not Launcher.SLURM:
            raise UserError("--slurm KEY=VALUE sets a Slurm job: pass --launcher slurm with it")


sweep_app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=HELP,
)
app.add_typer(sweep_app, name="sweep")


@sweep_app.callback(invoke_without_command=True)
@option_group("execution", SweepExecution)
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
        str | None,
        typer.Option(metavar="I/N", help="run only the i-th of n disjoint shares of the runs"),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", "--status", help="list the runs and how far each has come; no more"
        ),
    ] = False,
    *,
    execution: SweepExecution,
) -> None:
    """Train every cell of a grid x seeds (skipping finished runs, resuming interrupted
    ones), then write the report to DIR/report; `seq2seq sweep report DIR` rewrites it."""
    if ctx.invoked_subcommand is not None:
        if config or sweep_dir or shard or dry_run or execution.given():
            raise UserError("'seq2seq sweep report DIR' takes no options; pass only DIR")
        return
    if config is None:
        raise UserError(
            "pass --config SWEEP_FILE (see configs/sweeps/), or: seq2seq sweep report DIR"
        )
    execution.check()
    from seq2seq.sweep import describe_sweep, load_sweep, parse_shard, run_sweep, submit_sweep

    plan = load_sweep(config)
    part = parse_shard(shard) if shard else None
    root = sweep_dir or Path("runs/sweeps") / plan.name
    if dry_run:
        print(describe_sweep(plan, root, part))
    elif execution.launcher is not None:
        print(submit_sweep(plan, root, part, execution.launcher.value, execution.slurm or []))
    else:
        report = run_sweep(plan, root, part, execution.jobs, execution.jobs_per_gpu)
        print(report.read_text(encoding="utf-8"), end="")


@sweep_app.command("report")
def sweep_report(
    directory: Annotated[Path, typer.Argument(help="a sweep directory (holds sweep.yaml)")],
) -> None:
    """Write DIR/report from the sweep's finished runs; list those not finished."""
    from seq2seq.sweep import SweepDir, write_report

    print(write_report(SweepDir(directory)).read_text(encoding="utf-8"), end="")
