"""`seq2seq sweep --launcher slurm|local`: the runs as jobs submitted through submitit (the
`slurm` extra): a Slurm job array that the command submits and leaves, or processes on this
machine (`local`: submitit's local executor, to try the jobs out) that it waits for, then
writes the report. Each job trains one run by its name (`RunJob`), as a --jobs worker does;
what the runs share is made before the submission (runner.prepare_sweep)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from seq2seq.checkpoint import lock_holder
from seq2seq.device import default_threads
from seq2seq.errors import UserError
from seq2seq.files import atomic_write_text
from seq2seq.processes import same_code_environment
from seq2seq.sweep.directory import SweepDir
from seq2seq.sweep.reporting.report import write_report
from seq2seq.sweep.running.jobs import plan_slots
from seq2seq.sweep.running.one_run import Outcome, Status, plan_run, train_job
from seq2seq.sweep.running.runner import note, prepare_sweep, raise_for_outcomes
from seq2seq.sweep.spec import Run, Shard, Sweep

INSTALL = "pip install 'seq2seq[slurm]' (or pip install 'submitit>=1.5,<2')"
JOBS = "jobs"  # the sweep directory's folder for submitit's files and each job's output
# submitit ends a job after its time limit, in minutes; Slurm's may be set with --slurm time=
_DEFAULT_MINUTES = 24 * 60
_LOCAL_MINUTES = 7 * 24 * 60


class RunJob:
    """The job of one run (one_run.train_job). It has submitit's `checkpoint`: at the time
    limit (submitit's signal) Slurm requeues it, and it resumes from its last checkpoint."""

    def __call__(self, root: str, name: str, threads: int | None) -> Outcome:
        return train_job(root, name, threads)

    def checkpoint(self, *args: Any) -> Any:
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args)


def submit_sweep(
    sweep: Sweep, root: Path, shard: Shard | None, launcher: str, options: list[str]
) -> str:
    """Submit the runs (of the shard) that are neither finished nor being trained; returns
    what was submitted and where each job writes its output (with `local`: the report)."""
    submitit = _submitit()
    settings = slurm_settings(options)
    folder = (Path(root) / JOBS).absolute()
    executor = _executor(submitit, launcher, folder, {"job_name": sweep.name, **settings})
    directory, runs = prepare_sweep(sweep, root, shard)
    todo = [run for run in runs if _to_submit(directory, sweep, run)]
    if not todo:
        note(sweep, "no run left to submit")
        return write_report(directory).read_text(encoding="utf-8")
    slots = plan_slots(len(todo), None, [], default_threads(), len(todo))
    threads = None if launcher == "slurm" else slots[0].threads  # Slurm's: its cpus_per_task
    with _same_code():
        jobs = executor.map_array(
            RunJob(),
            [str(directory.root.absolute())] * len(todo),
            [r.name for r in todo],
            [threads] * len(todo),
        )
    pairs = zip(todo, jobs, strict=True)
    lines = [f"{run.name}: job {job.job_id}, output {job.paths.stdout}" for run, job in pairs]
    _record(folder, lines)
    if launcher == "local":
        return _wait(sweep, directory, todo, jobs)
    return "\n".join([*lines, _submitted(sweep, len(todo), jobs[0].job_id, folder)])


def _submitit() -> ModuleType:
    try:
        import submitit
    except ImportError:
        raise UserError(f"--launcher needs submitit, which is not installed: {INSTALL}") from None
    return submitit


def slurm_settings(options: list[str]) -> dict[str, Any]:
    """`--slurm KEY=VALUE` options as submitit's Slurm parameters (partition, time,
    gpus_per_node, cpus_per_task, mem, array_parallelism, ...); whole numbers as numbers."""
    settings: dict[str, Any] = {"time": _DEFAULT_MINUTES}
    for option in options:
        key, equals, value = option.partition("=")
        if not equals or not key.strip() or not value.strip():
            raise UserError(f"--slurm {option!r}: expected KEY=VALUE, e.g. --slurm partition=gpu")
        value = value.strip()
        settings[key.strip().replace("-", "_")] = int(value) if value.isdigit() else value
    return settings


def _to_submit(directory: SweepDir, sweep: Sweep, run: Run) -> bool:
    """Whether the run is neither finished nor being trained now (by a job still running)."""
    if plan_run(directory, sweep, run).finished:
        return False
    holder = lock_holder(directory.run(run))
    if holder is not None:
        note(sweep, f"{run.name}: being trained by {holder}; not submitted again")
    return holder is None


def _executor(submitit: ModuleType, launcher: str, folder: Path, settings: dict[str, Any]) -> Any:
    """submitit's executor of the launcher, its files in `folder`, one subfolder per job."""
    if launcher == "local":
        executor = submitit.LocalExecutor(folder=folder / "%j")
        executor.update_parameters(timeout_min=_LOCAL_MINUTES)  # its default: 2 minutes
        return executor
    try:
        executor = submitit.SlurmExecutor(folder=folder / "%j")
    except RuntimeError as error:  # no srun: not a machine of a Slurm cluster
        raise UserError(
            f"--launcher slurm: {error.args[0] if error.args else error}; submit from a "
            "machine of the cluster, or try the jobs here with --launcher local"
        ) from None
    try:
        executor.update_parameters(**settings)
    except (ValueError, TypeError) as error:
        text = str(error)
        valid = re.findall(r"^\s*- (\w+) \(default", text, flags=re.MULTILINE)
        keys = f"; its keys: {', '.join(valid)}" if valid else ""
        raise UserError(
            f"--slurm: submitit refuses {text.splitlines()[0]}{keys}; fix or drop that --slurm"
        ) from None
    return executor


@contextmanager
def _same_code() -> Iterator[None]:
    """The jobs import this process's seq2seq: submitit's local executor copies this
    environment into its processes, and sbatch exports it to the jobs."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = same_code_environment(dict(os.environ))["PYTHONPATH"]
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def _record(folder: Path, lines: list[str]) -> None:
    """Add the submitted jobs to FOLDER/submitted.txt, the list of every submission."""
    listing = folder / "submitted.txt"
    before = listing.read_text(encoding="utf-8") if listing.is_file() else ""
    atomic_write_text(listing, before + "".join(line + "\n" for line in lines))


def _wait(sweep: Sweep, directory: SweepDir, runs: list[Run], jobs: list[Any]) -> str:
    """Wait for the local jobs, then write the report (and end as a sweep ends)."""
    from submitit.core.utils import FailedJobError, UncompletedJobError

    outcomes = {}
    for run, job in zip(runs, jobs, strict=True):
        try:
            outcome = job.result()
        except (FailedJobError, UncompletedJobError) as error:
            lines = [line for line in str(error).splitlines() if line.strip()]
            outcome = Outcome(Status.FAILED, f"its job failed: {lines[-1] if lines else error}")
        outcomes[run.name] = outcome
        said = f": {outcome.message}" if outcome.message else ""
        note(sweep, f"{run.name}: {outcome.status.value}{said}")
    report = write_report(directory)
    raise_for_outcomes(sweep, outcomes)
    return report.read_text(encoding="utf-8")


def _submitted(sweep: Sweep, count: int, job_id: str, folder: Path) -> str:
    array = job_id.split("_")[0]
    return (
        f"submitted {count} run(s) of sweep {sweep.name} as Slurm job array {array}; each job's "
        f"output is named above (and in {folder / 'submitted.txt'}). `seq2seq sweep ... "
        "--status` shows how far the runs have come; the same command again submits what is "
        f"not finished, and `seq2seq sweep report {folder.parent}` writes the report"
    )
