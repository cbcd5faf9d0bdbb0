"""A sweep file and its expansion into runs: cells (the grid's cartesian product) x seeds.

```yaml
name: attention-rnn
base: configs/multi30k_rnn.yaml   # relative to the working directory, like a config's data paths
grid: {model.attention.type: [dot, general, bahdanau]}   # dotted config field -> values
seeds: [1, 2, 3]
baseline: {model.attention.type: bahdanau}               # the reference: see `Baseline`
set: {train.max_time: 25m}                               # optional: fixed for every run
cells: [{model.attention.type: dot}, ...]                # optional: only these cells
continue_from: runs/sweeps/short                         # optional: see `continue_from`
```

Everything is checked before any run starts: each dotted field must be a field of the run
config, each run's config must validate, each of `cells` must be a cell of the grid and
the baseline's values values of the grid, and each cell's baseline one of the sweep's cells.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from seq2seq.config import (
    Config,
    config_from_dict,
    describe_validation_error,
    flatten,
    load_config,
    read_yaml,
)
from seq2seq.errors import UserError

NAME_PATTERN = r"^[A-Za-z0-9._-]+$"  # the run config's name pattern: usable as a directory

# Fields the sweep itself sets per run: a grid or `set` entry for them would be overwritten.
_RESERVED = {
    "seed": "list the seeds under `seeds:`",
    "name": "the sweep names every run after its directory",
}
# Grid fields that change what the tokenizer is trained on, or how (a tag is one of the
# tokenizer's user symbols).
_TAG_FIELDS = {"data.tags", "data.target_tags"}
_TOKENIZER_FIELDS = {"tokenizer", "data", "data.train", "data.src", "data.tgt", *_TAG_FIELDS}


class SweepFile(BaseModel):
    """The sweep file as written (see the module docstring); unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="default directory: runs/sweeps/NAME")
    base: str = Field(min_length=1, description="run config, relative to the working directory")
    grid: dict[str, list[Any]] = Field(min_length=1, description="dotted field -> values")
    seeds: list[int] = Field(min_length=1)
    baseline: dict[str, Any] = Field(
        description="the reference cell: a value per grid field, or for some of them, to "
        "compare each cell with the baseline of its own values of the others"
    )
    set: dict[str, Any] = Field(default_factory=dict, description="dotted field -> fixed value")
    cells: list[dict[str, Any]] | None = Field(
        None, min_length=1, description="only these cells of the grid; default: all of them"
    )
    continue_from: str | None = Field(
        None,
        min_length=1,
        description="a sweep directory: each run starts as a copy of its finished namesake "
        "there (test scores aside) and trains on to this sweep's budget",
    )

    @field_validator("grid")
    @classmethod
    def _values(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for field, values in grid.items():
            if not values:
                raise ValueError(f"{field} has no values; give at least one")
            if len({format_value(v) for v in values}) < len(values):
                raise ValueError(f"{field} lists a value twice; list each once")
        return grid

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) < len(seeds):
            raise ValueError("a seed is listed twice; list each once")
        return seeds

    @model_validator(mode="after")
    def _set_apart_from_grid(self) -> SweepFile:
        both = sorted(set(self.grid) & set(self.set))
        if both:
            raise ValueError(f"{', '.join(both)} in both grid and set; keep each in one")
        return self


class SweepDefinition(SweepFile):
    """What a sweep directory keeps in `sweep.yaml`: the sweep file plus its base config
    resolved (`set` applied), so that reports and re-runs need neither the base file nor
    the machine it was on."""

    config: dict[str, Any]


@dataclass(frozen=True)
class Cell:
    """One point of the grid: a value for each grid field, in the file's order."""

    values: tuple[tuple[str, Any], ...]
    key: str  # `short.field=value,...`, sorted: the cell's name in tables and directories

    @property
    def title(self) -> str:
        """The values alone, for plot labels."""
        return ", ".join(format_value(value) for _, value in self.values)


@dataclass(frozen=True)
class Run:
    cell: Cell
    seed: int
    name: str  # its directory under the sweep directory's runs/
    config: Config
    tokenizer: str  # the shared tokenizer it uses, relative to the sweep directory


@dataclass(frozen=True)
class Baseline:
    """The cell each cell is compared with. Where the sweep file's `baseline` gives a value
    for every grid field, that one cell; where it leaves fields out (`within`), the cell
    with its values for the fields it gives and the compared cell's own for the others:
    `{attention.type: scaled-dot}` over types x sizes compares each type with scaled-dot
    at the same size."""

    key: str  # the values the sweep file gives, named like a cell
    within: tuple[str, ...]  # the grid fields it leaves out, by their short names
    cells: dict[str, Cell]  # cell key -> that cell's baseline

    def of(self, cell: Cell) -> Cell:
        return self.cells[cell.key]

    def holds(self, cell: Cell) -> bool:
        """Whether `cell` is a baseline (its own)."""
        return self.of(cell) == cell

    @property
    def text(self) -> str:
        """The baseline in words: `attention.type=scaled-dot` at each hidden_dim."""
        return f"`{self.key}`" + (f" at each {', '.join(self.within)}" if self.within else "")


@dataclass(frozen=True)
class Sweep:
    definition: SweepDefinition
    cells: list[Cell]
    baseline: Baseline
    runs: list[Run]  # seed by seed: a sweep stopped halfway has every cell for some seeds

    @property
    def name(self) -> str:
        return self.definition.name

    def run(self, cell: Cell, seed: int) -> Run:
        return next(run for run in self.runs if run.cell == cell and run.seed == seed)


@dataclass(frozen=True)
class Shard:
    """Shard `index` (from 1) of `count`: every count-th run, so the shards are disjoint,
    cover the sweep and differ in size by at most one run."""

    index: int
    count: int

    def select(self, runs: list[Run]) -> list[Run]:
        return runs[self.index - 1 :: self.count]


def parse_shard(text: str) -> Shard:
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise UserError(
            f"--shard {text!r}: expected i/n with 1 <= i <= n, e.g. --shard 2/4 for the "
            "second of four shards"
        )
    return Shard(int(match.group(1)), int(match.group(2)))


def load_sweep(path: Path) -> Sweep:
    """Read and check a sweep file: its base config, fields, values and baseline."""
    source = Path(path)
    sweep_file = _validate(SweepFile, read_yaml(source), source)
    base_path = Path(sweep_file.base)
    if not base_path.is_file():
        raise UserError(
            f"{source}: base config {base_path} not found (relative to the working directory "
            f"{Path.cwd()}); fix `base:` or run from the directory it is relative to"
        )
    try:
        config = load_config(base_path).to_dict()
    except UserError as error:
        if str(error).startswith(str(base_path)):
            raise
        raise UserError(f"{base_path}: {error}") from None  # validation names the field only
    config["name"] = sweep_file.name  # runs are named per run; the base's own name is moot
    for field, value in sweep_file.set.items():
        _assign(config, field, value, source, "set")
    try:
        config = config_from_dict(config).to_dict()
    except UserError as error:
        raise UserError(f"{source}: with `set`: {error}") from None
    return expand(SweepDefinition(**sweep_file.model_dump(), config=config), source)


def read_definition(path: Path) -> SweepDefinition:
    """The definition a sweep directory keeps in `sweep.yaml`; `expand` makes it a sweep."""
    if not path.is_file():
        raise UserError(
            f"{path.parent} is not a sweep directory (no {path.name}); "
            "run seq2seq sweep --config FILE first, or pass the directory it wrote"
        )
    return _validate(SweepDefinition, read_yaml(path), path)


def expand(definition: SweepDefinition, source: Path) -> Sweep:
    """The cells and runs of a definition, every run's config built and validated."""
    fields = list(definition.grid)
    for field in fields:
        _locate(definition.config, field, source, "grid")
    short = _short_names(fields)
    tokenizer_fields = [f for f in fields if f in _TOKENIZER_FIELDS or f.startswith("tokenizer.")]
    pairs = [
        tuple(zip(fields, values, strict=True))
        for values in itertools.product(*definition.grid.values())
    ]
    cells = [Cell(values, _key(dict(values), short)) for values in pairs]
    if len({cell.key for cell in cells}) < len(cells):  # values differing only in "/"
        raise UserError(f"{source}: two cells get the same name; make the grid values differ")
    if definition.cells is not None:
        cells = _chosen_cells(definition, cells, short, source)
    baseline = _baseline(definition, cells, short, source)
    runs = []
    for seed in definition.seeds:
        for cell in cells:
            config = copy.deepcopy(definition.config)
            for field, value in cell.values:
                _assign(config, field, value, source, "grid")
            name = f"{cell.key},seed={seed}"
            config["seed"] = seed
            config["name"] = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{definition.name}-{name}")
            try:
                run_config = config_from_dict(config)
            except UserError as error:
                raise UserError(f"{source}: cell {cell.key}: {error}") from None
            values = dict(cell.values)
            # One tokenizer per sweep, or per value of the grid fields it depends on.
            tokenizer = _key({f: values[f] for f in tokenizer_fields}, short)
            shared = f"tokenizers/{tokenizer}" if tokenizer else "tokenizer"
            runs.append(Run(cell, seed, name, run_config, shared))
    _check_distinct(runs, source)
    return Sweep(definition, cells, baseline, runs)


def _check_distinct(runs: list[Run], source: Path) -> None:
    """Refuse two cells whose configs are one as the schema reads them (0 and 0.0 for a
    float): they would train the same model twice, under two names."""
    seen: dict[tuple[int, str], str] = {}
    for run in runs:
        read = (run.seed, run.config.model_dump_json(exclude={"name"}))
        if read in seen:
            raise UserError(
                f"{source}: cells {seen[read]} and {run.cell.key} are one config as it reads "
                "them (the values differ only in how they are written); list each value once"
            )
        seen[read] = run.cell.key


def _validate(model: type[SweepFile], data: Any, source: Path) -> Any:
    if not isinstance(data, dict):
        raise UserError(f"{source}: the top level must be a mapping (name, base, grid, seeds, ...)")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        problem = describe_validation_error(error, model).removeprefix("config error: ")
        raise UserError(f"{source}: {problem}") from None


def _assign(config: dict[str, Any], field: str, value: Any, source: Path, where: str) -> None:
    node, leaf = _locate(config, field, source, where)
    node[leaf] = value


def _locate(
    config: dict[str, Any], field: str, source: Path, where: str
) -> tuple[dict[str, Any], str]:
    """The section holding a dotted field of a resolved config, and the field's last part.
    A resolved config holds every field of the schema, so a path not in it is no field."""
    if field in _RESERVED:
        raise UserError(f"{source}: {where} sets {field!r}; {_RESERVED[field]}")
    *sections, leaf = field.split(".")
    node: Any = config
    for part in sections:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or leaf not in node:
        close = difflib.get_close_matches(field, list(flatten(config)), n=1)
        every = "every field: seq2seq config, or docs/configuration.md"
        hint = f"did you mean {close[0]}?" if close else every
        raise UserError(f"{source}: {where}: {field!r} is not a config field; {hint}")
    return node, leaf


def _cell_named(
    values: dict[str, Any],
    definition: SweepDefinition,
    cells: list[Cell],
    short: dict[str, str],
    source: Path,
) -> Cell:
    """The cell of the grid that `values` (a value per grid field) names."""
    if set(values) != set(definition.grid):
        raise UserError(
            f"{source}: each of cells must give a value for each grid field and nothing else "
            f"({', '.join(definition.grid)}); it gives {', '.join(values) or 'none'}"
        )
    key = _key(values, short)
    for cell in cells:
        if cell.key == key:
            return cell
    raise UserError(f"{source}: cells lists {key}, not a cell of the grid; pick values it lists")


def _baseline(
    definition: SweepDefinition, cells: list[Cell], short: dict[str, str], source: Path
) -> Baseline:
    """Each cell's baseline (see `Baseline`), each of them a cell of the sweep."""
    given = definition.baseline
    if not given or not set(given) <= set(definition.grid):
        raise UserError(
            f"{source}: baseline must give a value for each grid field, or for some of them "
            f"({', '.join(definition.grid)}); it gives {', '.join(given) or 'none'}"
        )
    for field, value in given.items():
        if format_value(value) not in {format_value(v) for v in definition.grid[field]}:
            raise UserError(
                f"{source}: baseline {short[field]}={format_value(value)} is not a value of "
                "the grid; pick one it lists"
            )
    by_key = {cell.key: cell for cell in cells}
    of = {}
    for cell in cells:
        key = _key(dict(cell.values) | given, short)
        if key not in by_key:
            raise UserError(
                f"{source}: baseline {key} of cell {cell.key} is not one of the cells; "
                "list it under cells"
            )
        of[cell.key] = by_key[key]
    within = tuple(short[field] for field in definition.grid if field not in given)
    return Baseline(_key(given, short), within, of)


def _chosen_cells(
    definition: SweepDefinition, cells: list[Cell], short: dict[str, str], source: Path
) -> list[Cell]:
    """The cells `cells:` lists, in the grid's order."""
    chosen = [
        _cell_named(values, definition, cells, short, source) for values in definition.cells or []
    ]
    if len(set(chosen)) < len(chosen):
        raise UserError(f"{source}: cells lists a cell twice; list each once")
    return [cell for cell in cells if cell in chosen]


def _short_names(fields: list[str]) -> dict[str, str]:
    """The last two parts of each dotted field (`attention.type`), or all of it where that
    would name two fields alike."""
    tails = {field: ".".join(field.split(".")[-2:]) for field in fields}
    taken = list(tails.values())
    return {f: tail if taken.count(tail) == 1 else f for f, tail in tails.items()}


def _key(values: dict[str, Any], short: dict[str, str]) -> str:
    """`name=value` pairs sorted by name, so reordering the grid keeps directory names."""
    pairs = sorted(f"{short[field]}={format_value(value)}" for field, value in values.items())
    return ",".join(pairs).replace("/", "_")


def format_value(value: Any) -> str:
    """A value as YAML would write it: `dot`, `5`, `true`, `null`, `[1,2]`."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
