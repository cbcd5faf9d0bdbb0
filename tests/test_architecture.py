"""The layout documented in docs/architecture.md holds: imports point down its floors, no
modules import each other round a circle, and functions stay short enough to read on one
screen."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "seq2seq"
MAX_FUNCTION_LINES = 50


def documented_floors() -> dict[str, int]:
    """Top-level package or module name -> floor, from the table in docs/architecture.md."""
    text = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    floors = {}
    for floor, cell in re.findall(r"^\|\s*(\d+)\s*\|(.*)\|\s*$", text, flags=re.MULTILINE):
        for name in re.findall(r"`([\w.]+)`", cell):
            floors[name] = int(floor)
    return floors


def part_of(module: str) -> str:
    """`seq2seq.train.run` -> `train`; the package's own `__init__` -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name if name != "seq2seq" else "seq2seq.__init__"] = path
    return found


def imports(path: Path) -> set[str]:
    """Every seq2seq module that a file imports, wherever in the file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("seq2seq"):
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("seq2seq")}
    return names


def test_every_module_has_a_documented_floor():
    floors = documented_floors()
    assert floors, "docs/architecture.md has no floors table"
    unplaced = sorted({part_of(m) for m in modules()} - set(floors))
    assert not unplaced, f"place these in docs/architecture.md's floors table: {unplaced}"


def test_no_import_runs_up_a_floor():
    floors = documented_floors()
    upward = []
    for module, path in modules().items():
        here = floors[part_of(module)]
        for target in imports(path):
            there = floors[part_of(target)]
            if there > here:
                upward.append(f"{module} (floor {here}) imports {target} (floor {there})")
    assert not upward, "\n".join(upward)


def test_the_guard_sees_an_upward_import(tmp_path):
    """The check itself can fail: a ground-floor file importing the trainer is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from seq2seq.train.trainer import Trainer\n")
    floors = documented_floors()
    assert any(floors[part_of(t)] > floors["config"] for t in imports(bad))


def function_lengths() -> list[tuple[str, int]]:
    lengths = []
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lengths.append((f"{module}.{node.name}", node.end_lineno - node.lineno + 1))
    return lengths


def test_no_function_is_longer_than_the_limit():
    lengths = function_lengths()
    long = [f"{name}: {n} lines" for name, n in lengths if n > MAX_FUNCTION_LINES]
    assert not long, "\n".join(long)


def import_graph(found: dict[str, Path]) -> dict[str, set[str]]:
    """Each module -> the modules of the package it imports (anywhere in the file, type
    checking's imports too)."""
    return {
        module: {target for target in imports(path) if target in found and target != module}
        for module, path in found.items()
    }


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """Modules that import each other round a circle (the first found), or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return path[path.index(module) :] + [module]
        if module in done:
            return None
        for target in sorted(graph[module]):
            found = visit(target, [*path, module])
            if found:
                return found
        done.add(module)
        return None

    for start in sorted(graph):
        found = visit(start, [])
        if found:
            return found
    return None


def test_no_modules_import_each_other_round_a_circle():
    found = circle(import_graph(modules()))
    assert found is None, " -> ".join(found)


def test_the_circle_guard_sees_a_circle():
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_hard_attention_is_asked_of_the_config_in_one_place():
    """`AttentionConfig.is_hard` holds the one comparison with the normalizer's name."""
    hard = r"""["']hard["']"""
    compared = re.compile(rf"normalizer\s*[!=]=\s*{hard}|{hard}\s*(?:not\s+)?in\s*\(")
    found = [
        module
        for module, path in modules().items()
        for line in path.read_text(encoding="utf-8").splitlines()
        if compared.search(line)
    ]
    assert found == ["seq2seq.config.attention"], found


def test_no_fmt_skip_packs_a_function_s_arguments():
    """Functions fit the line limit by being short, not by the formatter being told off."""
    marked = [
        f"{module}:{number}"
        for module, path in modules().items()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "fmt: skip" in line
    ]
    assert not marked, "\n".join(marked)


MAX_PARAMETERS = 8


def parameter_counts() -> dict[str, int]:
    """Each function's named parameters: self, cls, **keywords and a command's `decode`
    (the decode section's options, derived: `cli.decoding.decoding_options`) aside."""
    counts = {}
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = node.args
                named = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
                names = [a.arg for a in named if a.arg not in ("self", "cls", "decode")]
                counts[f"{module}.{node.name}"] = len(names) + (arguments.vararg is not None)
    return counts


def test_no_function_takes_more_than_the_limit_of_parameters():
    """A long list of options comes as a typed object (`cli.option_groups`, the decode
    section's derived options), not a parameter each."""
    over = {name: n for name, n in parameter_counts().items() if n > MAX_PARAMETERS}
    assert not over, over
