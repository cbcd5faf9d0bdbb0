"""Sweeps: a grid over config fields x seeds, each run an ordinary run directory, trained
or resumed in turn (or by shards), and a report with significance against a baseline."""

from seq2seq.sweep.directory import SweepDir
from seq2seq.sweep.reporting.report import write_report
from seq2seq.sweep.running.launch import submit_sweep
from seq2seq.sweep.running.runner import describe_sweep, run_sweep
from seq2seq.sweep.spec import Shard, Sweep, load_sweep, parse_shard

__all__ = [
    "Shard",
    "Sweep",
    "SweepDir",
    "describe_sweep",
    "load_sweep",
    "parse_shard",
    "run_sweep",
    "submit_sweep",
    "write_report",
]
