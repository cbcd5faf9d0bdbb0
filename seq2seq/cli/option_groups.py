"""Options that come as a group: a frozen dataclass whose fields are a command's options
(each annotated with its typer option, its default the option's), which the command takes
as one typed object instead of a parameter per option."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any


def option_group(parameter: str, group: type) -> Callable[[Callable], Callable]:
    """Give a command an option per field of `group` in place of its parameter
    `parameter`, which gets them as one `group`."""
    hints = typing.get_type_hints(group, include_extras=True)
    fields = dataclasses.fields(group)
    keyword = inspect.Parameter.KEYWORD_ONLY

    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command, eval_str=True)
        kept = [p for p in signature.parameters.values() if p.name != parameter]

        @functools.wraps(command)
        def run(**arguments: Any) -> Any:
            values = {field.name: arguments.pop(field.name) for field in fields}
            return command(**arguments, **{parameter: group(**values)})

        added = [
            inspect.Parameter(
                field.name, keyword, default=_default(field), annotation=hints[field.name]
            )
            for field in fields
        ]
        positional = [p for p in kept if p.kind is not keyword]
        keywords = [p for p in kept if p.kind is keyword]
        run.__signature__ = signature.replace(parameters=positional + added + keywords)
        run.__annotations__ = {k: v for k, v in command.__annotations__.items() if k != parameter}
        return run

    return decorate


def _default(field: dataclasses.Field) -> Any:
    """The option's default: the field's, or none (a required option)."""
    return inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default
