"""Reading a run config: YAML (with `extends`), `--set` overrides, then validation by the
schema; every problem becomes one `UserError` line naming the field, the bad value and
what is allowed."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from seq2seq.config.corpora import UNION_TAG
from seq2seq.config.schema import Config
from seq2seq.errors import UserError


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `dotted.key=value` override in place; the value is parsed as YAML."""
    key, sep, raw = assignment.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise UserError(
            f"bad override {assignment!r}: expected KEY=VALUE, e.g. train.max_steps=100"
        )
    try:
        _refuse_alias_bombs(raw, "--set")
        value = yaml.safe_load(raw) if raw.strip() else raw
    except (yaml.YAMLError, ValueError):  # ValueError: a number too long to convert
        value = raw
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise UserError(
                f"bad override {assignment!r}: {'.'.join(parts[: i + 1])} is not a section"
            )
        node = child
    node[parts[-1]] = value


def _allowed_keys(loc: tuple[Any, ...], model: type[BaseModel]) -> list[str]:
    """The keys of the section at `loc` (a union's member where its tag says which)."""
    annotation: Any = model
    for part in loc:
        if isinstance(part, int):  # an item of a list of sections
            continue
        if str(part).startswith(UNION_TAG):  # the union's member the value was read as
            annotation = _section_in(annotation, str(part)[1:]) or annotation
            continue
        section = _section_in(annotation)
        field = section.model_fields.get(str(part)) if section else None
        if field is None:
            return []
        annotation = field.annotation
    section = _section_in(annotation)
    return list(section.model_fields) if section else []


def _section_in(annotation: Any, name: str | None = None) -> type[BaseModel] | None:
    """The section a field's type holds (the one of that `name`, if given): itself, or in
    an optional, a list or a union."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation if name in (None, annotation.__name__) else None
    found = (_section_in(arg, name) for arg in typing.get_args(annotation))
    return next(filter(None, found), None)


def describe_validation_error(error: ValidationError, root: type[BaseModel] | None = None) -> str:
    """All problems of a pydantic error as one line: field, bad value, what is allowed.

    `root` is the model that was validated (default: `Config`), for the allowed keys.
    """
    problems = []
    for item in error.errors():
        loc = tuple(item["loc"])
        shown = [str(part) for part in loc if not str(part).startswith(UNION_TAG)]
        field = ".".join(shown) or "config"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            allowed = ", ".join(_allowed_keys(loc[:-1], root or Config))
            problems.append(f"unknown key {field!r}; allowed here: {allowed}")
        elif item["type"] == "missing":
            problems.append(f"{field}: required field is missing")
        elif item["type"] == "list_type" and item.get("input") is None:
            problems.append(f"{field} = None: give a list, [] for none")
        elif isinstance(item.get("input"), dict):  # a check across fields of a section
            problems.append(f"{field}: {message}")
        else:
            problems.append(f"{field} = {_echo(item.get('input'))}: {message}")
    return "config error: " + "; ".join(problems)


def _echo(value: Any, limit: int = 60) -> str:
    """A bad value as the error line shows it: cut, so that a huge one stays one short line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def config_from_dict(data: dict[str, Any], overrides: list[str] = ()) -> Config:
    for assignment in overrides:
        apply_override(data, assignment)
    try:
        return Config.model_validate(data)
    except ValidationError as error:
        raise UserError(describe_validation_error(error)) from None


def read_yaml(path: str | Path) -> Any:
    """The parsed content of a YAML file (None if empty); a missing file, bad YAML or
    text that is not UTF-8 is a one-line `UserError`."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file {path} not found; pass an existing YAML file to --config")
    try:
        text = path.read_text(encoding="utf-8")
        _refuse_alias_bombs(text, path)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "cannot parse"
        raise UserError(f"{path}: invalid YAML{where}: {problem}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text; save the config as UTF-8") from None
    except ValueError as error:  # a number of thousands of digits
        raise UserError(f"{path}: a value YAML cannot convert ({error}); shorten it") from None
    return data


MAX_VALUES = 100_000  # far more than any config holds, far less than an alias bomb


def _refuse_alias_bombs(text: str, where: Path | str) -> None:
    """Refuse YAML that would expand to more than MAX_VALUES values: aliases (`*name`) let
    a few hundred bytes stand for gigabytes once the config is read as plain data."""
    try:
        root = yaml.compose(text, yaml.SafeLoader)
        values = _expanded_size(root, {}) if root is not None else 0
    except RecursionError:
        raise UserError(f"{where}: YAML nested too deeply; write a flat config") from None
    if values > MAX_VALUES:
        raise UserError(
            f"{where}: YAML aliases (*name) expand to {values:,} values, more than the "
            f"{MAX_VALUES:,} allowed; write the values out"
        )


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values `node` holds once every alias is copied out (shared nodes are
    counted once per use, computed once)."""
    if id(node) not in sizes:
        if isinstance(node, yaml.SequenceNode):
            size = 1 + sum(_expanded_size(child, sizes) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            size = 1 + sum(
                _expanded_size(key, sizes) + _expanded_size(value, sizes)
                for key, value in node.value
            )
        else:
            size = 1
        sizes[id(node)] = size
    return sizes[id(node)]


def _read_mapping(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file's mapping, with the file named by its `extends` key (relative to it)
    underneath: sections merge key by key, and this file's values win."""
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: the top level must be a mapping of sections (data, model, ...)")
    parent = data.pop("extends", None)
    if parent is None:
        return data
    base = path.parent / str(parent)
    if base.resolve() in chain or base.resolve() == path.resolve():
        raise UserError(f"{path}: extends {parent} leads back to itself; break the cycle")
    if not base.is_file():
        raise UserError(f"{path}: extends {parent}, which is not a file (looked for {base})")
    return _merged(_read_mapping(base, (*chain, path.resolve())), data)


def _merged(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        both_sections = isinstance(value, dict) and isinstance(below, dict)
        merged[key] = _merged(below, value) if both_sections else value
    return merged


def load_config(path: str | Path, overrides: list[str] = ()) -> Config:
    """Read (following `extends`), override and validate a YAML config; every problem is a
    one-line `UserError`."""
    return config_from_dict(_read_mapping(Path(path)), overrides)
