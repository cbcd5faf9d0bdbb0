"""The decode section's fields as command-line options, derived from `DecodeConfig`.

Each field is one option (`length_penalty`: `--length-penalty`; a flag: `--sample/--no-
sample`), whose help is the field's description and whose value is checked as the config
checks that field (`field_problem`), so that a bad one is named with its option. A command
declares a parameter `decode` and decorates itself with `decoding_options(...)`: it gets
the fields given as `decode` (field -> value; the others stay the run's own), and how they
combine is checked where they meet the run's decode section (`decode_options`).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import typing
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from pydantic.fields import FieldInfo

from seq2seq.config import DecodeConfig
from seq2seq.config.decode import field_problem, plain_type

EVERY_FIELD = tuple(DecodeConfig.model_fields)
# What forced scoring (`score`) reads of the decode section: no search runs.
FORCED_FIELDS = ("length_penalty", "batch_tokens", "tgt_lang", "tag")


def flag(name: str) -> str:
    """The option of a decode field: `--length-penalty` for `length_penalty`."""
    return "--" + name.replace("_", "-")


def cli_spelling(name: str, value: Any = None) -> str:
    """An option as messages spell it here (`config.decode.Spelling`): `--beam 3`."""
    return flag(name) if value is None else f"{flag(name)} {value}"


def _metavar(field: FieldInfo, kind: type) -> str:
    """N, NUMBER, the choices of a `Literal` (beam|early|exact), or NAME."""
    choices = [a for a in typing.get_args(field.annotation) if isinstance(a, str)]
    return "|".join(choices) or {int: "N", float: "NUMBER"}.get(kind, "NAME")


def checked(name: str) -> Callable[[Any], Any]:
    """A value of the field `name` as the config takes it, or a bad parameter saying why."""

    def check(value: Any) -> Any:
        problem = None if value is None else field_problem(name, value)
        if problem is not None:
            raise typer.BadParameter(f"bad decoding option: {name} = {value!r}: {problem}")
        return value

    return check


def typer_parameter(name: str) -> inspect.Parameter:
    """The keyword parameter that makes typer read the field `name` as an option."""
    field = DecodeConfig.model_fields[name]
    kind = plain_type(name)
    declared = f"{flag(name)}/--no-{flag(name)[2:]}" if kind is bool else flag(name)
    metavar = None if kind is bool else _metavar(field, kind)
    option = typer.Option(
        declared,
        help=f"{field.description}; default: the run's decode.{name}",
        metavar=metavar,
        callback=checked(name),
        show_default=False,
    )
    annotation = Annotated[kind | None, option]
    keyword = inspect.Parameter.KEYWORD_ONLY
    return inspect.Parameter(name, keyword, default=None, annotation=annotation)


def decoding_options(fields: Sequence[str] = EVERY_FIELD) -> Callable[[Callable], Callable]:
    """Give a command an option per decode field in `fields`, in place of its parameter
    `decode`, which gets the fields given."""

    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command, eval_str=True)
        kept = [p for p in signature.parameters.values() if p.name != "decode"]

        @functools.wraps(command)
        def run(**arguments: Any) -> Any:
            given = {name: arguments.pop(name) for name in fields}
            decode = {name: value for name, value in given.items() if value is not None}
            return command(**arguments, decode=decode)

        added = [typer_parameter(name) for name in fields]
        run.__signature__ = signature.replace(parameters=kept + added)  # what typer reads
        run.__annotations__ = {k: v for k, v in command.__annotations__.items() if k != "decode"}
        return run

    return decorate


def add_argparse_options(parser: argparse.ArgumentParser, skip: Sequence[str] = ()) -> None:
    """The same options for an argparse parser (a script's): each field not in `skip`,
    default None (the run's own), checked as the config checks it."""
    for name in EVERY_FIELD:
        if name in skip:
            continue
        field = DecodeConfig.model_fields[name]
        kind = plain_type(name)
        described = f"{field.description}; default: the run's decode.{name}"
        if kind is bool:
            parser.add_argument(flag(name), action=argparse.BooleanOptionalAction, help=described)
            continue
        parser.add_argument(flag(name), type=_argparse_reader(name, kind), help=described)


def _argparse_reader(name: str, kind: type) -> Callable[[str], Any]:
    check = checked(name)

    def read(text: str) -> Any:
        try:
            return check(kind(text))
        except (ValueError, typer.BadParameter) as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return read
