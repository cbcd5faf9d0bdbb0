"""The configuration reference, read off the schema: every field's allowed values, default
and description, as Markdown (docs/configuration.md) or as a commented YAML config
(`seq2seq config`). One source, so the two cannot disagree with the code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from seq2seq.config.corpora import DatasetCorpus, PathCorpus
from seq2seq.config.schema import Config


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()  # stands for the default of a field that has none

MARKDOWN_HEADER = """\
# Configuration reference

<!-- Generated from seq2seq/config/schema.py by `seq2seq config --markdown`; do not edit.
     tests/test_config_reference.py fails when this file is out of date. -->

A run is configured by one YAML file (`configs/*.yaml` are examples). Only `data.src`,
`data.tgt` (unless each corpus names its pair), `data.train` and `data.valid` are required;
every other field has the default below. An unknown key, a value of the wrong type or out
of range, inf and NaN are refused with one line naming the field.

- `extends: BASE.yaml` (a path relative to the file) starts from another config: its
  sections are merged key by key and the file's own values win.
- `--set section.field=value` (repeatable) changes a field on the command line; the value
  is read as YAML (`--set model.attention.type=general --set train.max_steps=100`).
- `seq2seq config --config FILE [--set ...]` prints the config as the run will see it,
  every default filled in and each field commented; without `--config`, the defaults.
- A corpus (`data.train`, `data.valid`, `data.test`) is a prefix, a file or a dataset:
  `data.train: data/multi30k/train` with `src: de`, `tgt: en` reads
  `data/multi30k/train.de` and `.en` (or `.de.gz` and `.en.gz`); a path ending in `.tsv`,
  `.jsonl` (or either `.gz`) is one file of pairs; a mapping with `path` (PathCorpus below)
  gives one of these its own pair (`{path: data/multi30k/train, src: fr, tgt: en}`:
  docs/training.md#many-language-pairs); a mapping with `dataset` (the last table) names a
  Hugging Face dataset (docs/training.md#corpus-formats).
"""

# Mappings a field may hold besides its plain values, each documented in a table of its own.
MAPPINGS: dict[str, type[BaseModel]] = {"PathCorpus": PathCorpus, "DatasetCorpus": DatasetCorpus}


def section_of(annotation: Any) -> type[BaseModel] | None:
    """The config section a field holds, or None for a plain value."""
    is_section = isinstance(annotation, type) and issubclass(annotation, BaseModel)
    return annotation if is_section else None


@dataclass(frozen=True)
class Entry:
    """A field of the schema, with the default it has where it is."""

    path: str  # dotted, e.g. train.optimizer.lr
    section: type[BaseModel] | None  # the section it holds, or None for a plain value
    default: Any  # a section's default instance; REQUIRED where there is none
    description: str
    allowed: str  # "" for a section


def walk(model: type[BaseModel] = Config, prefix: str = "") -> list[Entry]:
    """Every field of `model` and of its sections, depth first in schema order. A section's
    defaults are its class's (the Transformer's self-attention has a class of its own)."""
    properties = model.model_json_schema()["properties"]
    entries = []
    for name, field in model.model_fields.items():
        default = REQUIRED if field.is_required() else field.get_default(call_default_factory=True)
        section = section_of(field.annotation)
        kind = "" if section else allowed(properties[name])
        entries.append(Entry(prefix + name, section, default, field.description or "", kind))
        if section is not None:
            entries += walk(section, f"{prefix}{name}.")
    return entries


def allowed(prop: dict[str, Any]) -> str:
    """What a JSON-schema property accepts, in words."""
    options = prop.get("anyOf") or prop.get("oneOf")  # oneOf: a discriminated union
    if options:
        return " or ".join(allowed(option) for option in options)
    if "const" in prop:
        return str(prop["const"])
    if "$ref" in prop:
        name = prop["$ref"].rpartition("/")[2]
        return f"a {name} mapping" if name in MAPPINGS else name
    if "enum" in prop:
        return "one of " + ", ".join(map(str, prop["enum"]))
    kind = prop.get("type")
    if kind in ("integer", "number"):
        return _bounded("an integer" if kind == "integer" else "a number", prop)
    if kind == "array":
        if "prefixItems" in prop:
            return "[" + ", ".join(allowed(item) for item in prop["prefixItems"]) + "]"
        items = prop["items"]
        if items.get("type") in ("integer", "number"):  # the noun, not the bound, takes the s
            return "a list of " + _bounded(f"{items['type']}s", items)
        options = items.get("anyOf") or items.get("oneOf") or [items]
        return "a list of " + " or ".join(f"{allowed(o).removeprefix('a ')}s" for o in options)
    if kind == "string":
        if "pattern" in prop:
            return f"a string matching {prop['pattern']}"
        return "a non-empty string" if prop.get("minLength") else "a string"
    return {"boolean": "true or false", "null": "null", "object": "a mapping"}.get(kind, str(kind))


def _bounded(noun: str, prop: dict[str, Any]) -> str:
    signs = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}
    bounds = [f"{sign} {_number(prop[key])}" for key, sign in signs.items() if key in prop]
    return f"{noun} {' and '.join(bounds)}" if bounds else noun


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def markdown() -> str:
    """docs/configuration.md: a table per section."""
    entries = walk()
    titles = {e.path: e.description for e in entries if e.section is not None}
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        if entry.section is None:
            groups.setdefault(entry.path.rpartition(".")[0], []).append(entry)
    for name, mapping in MAPPINGS.items():
        titles[name] = (mapping.__doc__ or "").strip()
        groups[name] = walk(mapping, f"{name}.")
    parts = [MARKDOWN_HEADER]
    for group, rows in groups.items():
        title = f"`{group}`: {titles[group]}" if group else "The run"
        parts.append(f"\n## {title}\n\n| field | default | allowed | description |\n")
        parts.append("|---|---|---|---|\n")
        for row in rows:
            default = "required" if row.default is REQUIRED else f"`{yaml_value(row.default)}`"
            cells = (row.allowed.replace("|", "\\|"), row.description.replace("|", "\\|"))
            parts.append(f"| `{row.path}` | {default} | {cells[0]} | {cells[1]} |\n")
    return "".join(parts)


def commented_yaml(config: dict[str, Any] | None = None) -> str:
    """A config (nested, as YAML reads it; default: the defaults) as YAML, each field
    commented with its description and what it allows; a missing required one is empty."""
    lines = []
    for entry in walk():
        depth = entry.path.count(".")
        pad, key = "  " * depth, entry.path.rpartition(".")[2]
        if entry.section is not None:
            lines.append(f"{pad}{key}:  # {entry.description}")
            continue
        value = entry.default if config is None else _lookup(config, entry.path)
        required = "REQUIRED; " if value is REQUIRED else ""
        note = f"{required}{entry.description}; {entry.allowed}"
        lines.append(f"{pad}{key}: {yaml_value(value)}  # {note}")
    return "\n".join(lines) + "\n"


def _lookup(config: dict[str, Any], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return REQUIRED
        node = node[part]
    return node


def yaml_value(value: Any) -> str:
    """A value as it reads in YAML, on one line ("" for a missing required one)."""
    if value is REQUIRED:
        return ""
    if isinstance(value, tuple):
        value = list(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=1000)
    return text.replace("\n...\n", "").strip()
