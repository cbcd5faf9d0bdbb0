"""The Typer app and the entry point, which turns every problem into one line on stderr."""

from __future__ import annotations

import errno
import os
import sys
from typing import Annotated

import typer

from seq2seq.errors import UserError
from seq2seq.train.interrupt import Interrupted

HELP = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=HELP,
)


def _print_version(asked: bool) -> None:
    if asked:
        from seq2seq import __version__

        print(f"seq2seq {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="print the version"),
    ] = False,
) -> None:
    """Config-driven neural machine translation: train, translate, evaluate, sweep, serve.

    `seq2seq COMMAND -h` explains a command."""


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
        # A signal reaches every process torchrun started; rank 0 says what was saved.
        if os.environ.get("RANK", "0") == "0":
            print(f"seq2seq: {stop}", file=sys.stderr)
        sys.exit(stop.exit_code)
    except typer.Abort:
        print("seq2seq: interrupted", file=sys.stderr)
        sys.exit(130)
    except OSError as error:  # the file system refused: one line, never a traceback
        print(f"seq2seq: error: {_os_problem(error)}", file=sys.stderr)
        sys.exit(1 if error.errno in (errno.ENOSPC, errno.EDQUOT) else 2)
    except (MemoryError, RuntimeError) as error:  # where no command said what to lower
        from seq2seq.device import out_of_memory

        if not out_of_memory(error):
            raise
        print("seq2seq: error: out of memory; free memory and try again", file=sys.stderr)
        sys.exit(1)
    except typer.TyperException as error:  # usage errors: unknown options, bad values
        ctx = getattr(error, "ctx", None)
        where = ctx.command_path if ctx else "seq2seq"
        message = error.format_message().rstrip(".")
        print(f"seq2seq: error: {message}; see '{where} --help'", file=sys.stderr)
        sys.exit(2)
    sys.exit(code or 0)
