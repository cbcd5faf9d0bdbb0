"""What a translator accepts, checked before any work: a wrong type is a `TypeError`, a
wrong value a `UserError`, each one line naming the argument and the fix.

The server checks each request with `text_problem` (and its prefixes and constraints'
phrases with `verbatim_problem`) before the request joins a batch, so that one unreadable
line fails its own request and never the batch it would have shared.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel

from seq2seq.errors import UserError

LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # where str.splitlines splits


def text_problem(line: str) -> str | None:
    """Why the tokenizer cannot read a string, or None. The one such string is one with a
    lone surrogate (U+D800 to U+DFFF: half of a UTF-16 pair, which JSON's \\uXXXX escapes
    and Python allow but which is not text and has no UTF-8)."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(line[error.start])
        return (
            f"character {error.start} is a lone surrogate (U+{code:04X}), which is not text; "
            "send valid Unicode"
        )
    return None


def verbatim_problem(text: str) -> str | None:
    """Why a string cannot be kept verbatim in an output (a prefix, a constraint's phrase),
    or None: `text_problem`'s, or a tab or line break, which would split the output's line
    (and an n-best list's tab-separated fields)."""
    at = next((i for i, char in enumerate(text) if char in "\t" + LINE_BREAKS), None)
    if at is not None:
        char = "a tab" if text[at] == "\t" else "a line break"
        return f"character {at} is {char}, which would split the output's line; use spaces"
    return text_problem(text)


def check_lines(lines: Any, name: str = "lines") -> None:
    """`lines` is a list (or tuple) of strings the tokenizer can read; errors call it `name`."""
    if isinstance(lines, str):
        raise TypeError(f"pass {name} as a list of lines; for one sentence: [sentence]")
    if not isinstance(lines, list | tuple):
        raise TypeError(f"{name} must be a list of strings, not {type(lines).__name__}")
    for number, line in enumerate(lines):
        check_line(line, f"{name}[{number}]")


def check_line(line: Any, name: str = "line") -> None:
    """`line` is a string the tokenizer can read; errors call it `name`."""
    if not isinstance(line, str):
        hint = "; decode bytes first (bytes.decode())" if isinstance(line, bytes) else ""
        raise TypeError(f"{name} is {type(line).__name__}, not str{hint}")
    problem = text_problem(line)
    if problem is not None:
        raise UserError(f"{name}: {problem}")


def check_prefixes(prefixes: Any, count: int, file: Path | None = None) -> None:
    """`prefixes` is None, or one string for each of `count` lines that can start an output
    (`verbatim_problem`); errors name `file`'s lines where they were read from one."""
    if prefixes is None:
        return
    name = "prefixes" if file is None else str(file)
    check_lines(prefixes, name)
    for number, prefix in enumerate(prefixes):
        problem = verbatim_problem(prefix)
        if problem is not None:
            where = f"prefixes[{number}]" if file is None else f"{file}, line {number + 1}"
            raise UserError(f"{where}: {problem}")
    _one_per_line(prefixes, count, name, "give one prefix per input line, empty for none")


def check_constraints(constraints: Any, count: int, file: Path | None = None) -> None:
    """`constraints` is None, or for each of `count` lines a list of the phrases its
    outputs must contain (an empty list: none), each some text the tokenizer can read;
    errors name `file`'s lines where they were read from one."""
    if constraints is None:
        return
    name = "constraints" if file is None else str(file)
    if not isinstance(constraints, list | tuple):
        raise TypeError(f"{name} must be a list of lists of phrases, one per line")
    for number, phrases in enumerate(constraints):
        where = f"constraints[{number}]" if file is None else f"{file}, line {number + 1}"
        if not isinstance(phrases, list | tuple):
            raise TypeError(f"{where} is {type(phrases).__name__}, not a list of phrases")
        for phrase in phrases:
            check_line(phrase, where)
            problem = verbatim_problem(phrase)
            if problem is not None:
                raise UserError(f"{where}: {problem}")
            if not phrase.strip():
                raise UserError(f"{where}: an empty phrase constrains nothing; leave it out")
    fix = "give the phrases of each input line, an empty list (or line) for none"
    _one_per_line(constraints, count, name, fix)


def _one_per_line(given: list | tuple, count: int, name: str, fix: str) -> None:
    """One line naming both counts where `given` has another length than the input."""
    if len(given) != count:
        lines = "line" if len(given) == 1 else "lines"
        raise UserError(f"{name} has {len(given)} {lines} but the input has {count}; {fix}")


def check_flag(value: Any, name: str) -> None:
    """`value` is a bool (1 or "no" would be taken for one)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")


def check_nbest(nbest: Any) -> None:
    """`nbest` is a whole number of hypotheses, at least one."""
    if isinstance(nbest, bool) or not isinstance(nbest, int):
        raise TypeError(f"nbest must be an int, not {type(nbest).__name__}")
    if nbest < 1:
        raise UserError(f"nbest {nbest}: ask for at least 1 hypothesis per line")


def check_option_kinds(model: type[BaseModel], changes: dict[str, Any]) -> None:
    """Refuse a bool where a field of `model` takes a number or a name (pydantic would
    read `beam=True` as 1), and anything but a bool where it takes a bool ("no" is true)."""
    for name, value in changes.items():
        field = model.model_fields.get(name)
        if field is None or value is None:
            continue  # an unknown name: the validation names it
        takes_bool = bool in get_args(field.annotation) or field.annotation is bool
        if isinstance(value, bool) and not takes_bool:
            raise TypeError(f"{name} must be a number or a name, not a bool ({value!r})")
        if takes_bool and not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, not {type(value).__name__}")


def check_load_arguments(
    run_dir: Any, checkpoint: Any, device: Any, int8: Any
) -> tuple[list[str | os.PathLike], list[str]]:
    """`Translator.load`'s run directory and checkpoint are paths or names, or lists of
    them (an ensemble), its device a name (its value is `pick_device`'s to check), int8 a
    bool; the run directories and checkpoints come back as lists."""
    if not isinstance(int8, bool):
        raise TypeError(f"int8 must be True or False, not {type(int8).__name__}")
    runs, checkpoints = _one_or_more(run_dir, "run_dir"), _one_or_more(checkpoint, "checkpoint")
    if device is not None and not isinstance(device, str):
        raise TypeError(f"device must be 'cpu', 'cuda' or 'auto', not {type(device).__name__}")
    return runs, [str(c) for c in checkpoints]


def _one_or_more(value: Any, name: str) -> list[str | os.PathLike]:
    """A str or path, or a non-empty list or tuple of them, as a list."""
    values = list(value) if isinstance(value, list | tuple) else [value]
    if not values:
        raise UserError(f"{name} is empty; give one or more (several: an ensemble)")
    for one in values:
        if not isinstance(one, str | os.PathLike):
            raise TypeError(
                f"{name} must be a str or a path, or a list of them, not {type(one).__name__}"
            )
    return values
