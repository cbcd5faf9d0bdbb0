"""A sweep that continues another (`continue_from`): checked against the first sweep before
anything is written, dry runs included, and its runs started as copies of their namesakes.

The first sweep must be a sweep directory other than this sweep's own, whose runs this
sweep's can resume: the same grid fields; a namesake there for every run (no grid value,
seed or cell it lacks); each run's config its namesake's but for what resuming may change
(`train.resumption.RESUMABLE_CHANGES`: the budgets, logging, decoding); and no budget that a
finished namesake has used up already, which its copy would resume only to stop at once,
tested again at the old budget under the new one's name.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from seq2seq.checkpoint import RunDir, load_checkpoint
from seq2seq.errors import UserError
from seq2seq.files import publish_directory
from seq2seq.sweep.directory import RunState, SweepDir, run_state
from seq2seq.sweep.spec import Run, Sweep, format_value
from seq2seq.train.progress import Progress, budgets_reached
from seq2seq.train.resumption import refused_on_resume

# What a continued run does not take from the run it continues: the test scores (they stay
# with the first sweep, as the scores at its budget), and what training writes at the end.
_NOT_CONTINUED = frozenset({"test", "summary.json", "best-attention.json"})
# The unit of each budget of TrainConfig (progress.budgets_used), for the refusal.
_UNITS = {"max_steps": "updates", "max_time": "seconds", "max_epochs": "epochs"}


def check_continuation(sweep: Sweep, root: Path, runs: list[Run]) -> None:
    """Refuse, in one line naming what differs, a sweep (run into `root`) that cannot
    continue the sweep of its `continue_from`; `runs`: the runs this command would do (a
    shard's), whose budgets are checked. Nothing to check for a sweep that continues none."""
    source = sweep.definition.continue_from
    if source is None:
        return
    first_dir = _first_directory(Path(source), root)
    try:
        first = first_dir.load()
    except UserError as error:
        raise UserError(f"continue_from {source}: {error}") from None
    problem = (
        _missing_runs(first, sweep)
        or _config_changes(first, sweep)
        or _budget_reached(first_dir, SweepDir(root), runs)
    )
    if problem:
        raise UserError(f"continue_from {source}: {problem}")


def continuable(parent: RunDir) -> bool:
    """Whether a run of another sweep can start from `parent`: finished, its last kept."""
    return run_state(parent) is RunState.FINISHED and parent.checkpoint("last").is_file()


def copy_to_continue(parent: RunDir, run: RunDir) -> None:
    """Make `run` (not started) a copy of the finished run `parent` without its test scores:
    training then resumes from its last checkpoint and goes on to the new budget."""
    if not continuable(parent):
        raise UserError(
            f"{parent.root} is not a finished run with its checkpoints/last.pt, so it cannot "
            "be continued; finish that sweep first (its checkpoints must be kept)"
        )

    def skipped(directory: str, names: list[str]) -> set[str]:
        return _NOT_CONTINUED & set(names) if Path(directory) == parent.root else set()

    # replace: a run not started may hold the shared tokenizer and nothing else.
    publish_directory(
        run.root, lambda tmp: shutil.copytree(parent.root, tmp, ignore=skipped), replace=True
    )


def _first_directory(path: Path, root: Path) -> SweepDir:
    """The first sweep's directory, refused where it is none."""
    where = f"continue_from {path}"
    fix = "give the directory of the sweep to continue (it holds sweep.yaml)"
    if not path.exists():
        raise UserError(
            f"{where}: no such directory (relative to the working directory {Path.cwd()}); {fix}"
        )
    if not path.is_dir():
        raise UserError(f"{where} is a file, not a sweep directory; {fix}")
    if path.resolve() == root.resolve():
        raise UserError(
            f"{where} is this sweep's own directory; run the continued sweep into a new --sweep-dir"
        )
    first = SweepDir(path)
    if not first.definition.is_file():
        what = "a run directory" if RunDir(path).config.is_file() else "a directory"
        sweep = path.parent.parent  # of a sweep's run: DIR/runs/RUN
        if path.parent.name == "runs" and SweepDir(sweep).definition.is_file():
            fix = f"give the directory of the sweep it is a run of, {sweep}"
        raise UserError(f"{where} is {what} with no sweep.yaml, not a sweep directory; {fix}")
    return first


def _missing_runs(first: Sweep, sweep: Sweep) -> str | None:
    """What this sweep has that the first lacks: other grid fields, a value, seed or cell."""
    fields, own = list(first.definition.grid), list(sweep.definition.grid)
    if set(fields) != set(own):
        return (
            f"its grid fields are {', '.join(fields)}, this sweep's {', '.join(own)}; keep "
            "the first sweep's grid fields (with any of their values)"
        )
    names = {run.name for run in first.runs}
    for run in sweep.runs:
        if run.name in names:
            continue
        for field, value in run.cell.values:
            had = [format_value(v) for v in first.definition.grid[field]]
            if format_value(value) not in had:
                return (
                    f"its grid has no {field}={format_value(value)} (it has {', '.join(had)}); "
                    "continue only values it has, and train new ones in a sweep of their own"
                )
        if run.seed not in first.definition.seeds:
            had = ", ".join(map(str, first.definition.seeds))
            return f"it has no seed {run.seed} (it has {had}); continue only seeds it has"
        return f"it has no cell {run.cell.key} (its `cells:` leave it out); continue only its cells"
    return None


def _config_changes(first: Sweep, sweep: Sweep) -> str | None:
    """The fields of a run's config that differ from its namesake's where resuming refuses it."""
    namesakes = {run.name: run for run in first.runs}
    for run in sweep.runs:
        changes = refused_on_resume(namesakes[run.name].config, run.config)
        if changes:
            shown = "; ".join(f"{k}: {old!r} -> {new!r}" for k, old, new in changes[:3])
            return (
                f"its run {run.name} was trained with another config ({shown}); give this "
                "sweep the first one's base, grid fields and set, changing only budgets "
                '(and what resuming allows: docs/training.md, "Resuming")'
            )
    return None


def _budget_reached(first_dir: SweepDir, directory: SweepDir, runs: list[Run]) -> str | None:
    """A budget that the runs to be continued have used up already in the first sweep."""
    reached: dict[str, list[tuple[float, str, float]]] = {}  # field -> (used, run, budget)
    for run in runs:
        parent = first_dir.run(run)
        if run_state(directory.run(run)) is not RunState.NOT_STARTED or not continuable(parent):
            continue  # not continued here, or it fails alone, named (copy_to_continue)
        progress = _progress(parent)
        if progress is not None:
            train = run.config.train
            for name, used in budgets_reached(train, progress, progress.elapsed).items():
                reached.setdefault(name, []).append((used, run.name, getattr(train, name)))
    if not reached:
        return None
    name, found = next(iter(reached.items()))
    used, run_name, budget = max(found)
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return (
        f"its run {run_name}{more} has trained {used:.0f} {_UNITS[name]} already, and this "
        f"sweep's train.{name} is {budget:.0f}: continued, it would train nothing; raise "
        f"train.{name} above {used:.0f}"
    )


def _progress(run: RunDir) -> Progress | None:
    """Where the run's last checkpoint stands; None where it cannot be read (resuming its
    copy then says so and goes on from previous.pt)."""
    try:
        return Progress.from_state(load_checkpoint(run.checkpoint("last"), mapped=True)["progress"])
    except (UserError, KeyError, TypeError, ValueError):
        return None
