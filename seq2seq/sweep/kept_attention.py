"""The attention files a finished run keeps so that its sweep's report can be rebuilt once
the checkpoints are gone: init-attention.json (the diagnostics of the initial weights, by
site) and best-attention.json (the heatmap of the best checkpoint). They are measured as
the run finishes (`keep_attention`), or by the report where they are missing. A damaged
one (not JSON, or not of the shape the report reads) is removed where the checkpoint it
was measured from is still there, so that the report measures it again, and makes the
run damaged where not."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from seq2seq.checkpoint import RunDir
from seq2seq.config import GREEDY_SEARCH, Config
from seq2seq.data.sources import read_corpus
from seq2seq.decode.translate import Translator
from seq2seq.files import atomic_write_text


def keep_attention(run: RunDir, cfg: Config) -> None:
    """Measure a finished run's attention files while its checkpoints are there."""
    initial_sites(run, cfg)
    save_best_attention(run, cfg)


def initial_sites(run: RunDir, cfg: Config) -> dict | None:
    """The diagnostics (site -> entry) of the run's initial weights on the validation set:
    init-attention.json, measured into it first where the run can still be loaded (its
    last checkpoint); None where it measures no attention or cannot be loaded."""
    if run.initial_attention.is_file():
        return json.loads(run.initial_attention.read_text("utf-8"))
    if not cfg.train.attention_diagnostics or not run.checkpoint("last").is_file():
        return None
    if cfg.train.init_from is not None:  # its start is its parent's weights, not a draw
        return None
    corpus = cfg.data.valid_corpora[0]
    valid = read_corpus(corpus, *cfg.data.pair(corpus))
    into = cfg.data.tgt_lang(corpus)
    initial = Translator.load(run.root, "init", "cpu", _run_threads(), tgt_lang=into)
    sites = initial.attention_diagnostics(valid.src, valid.tgt)["sites"]
    atomic_write_text(run.initial_attention, json.dumps(sites) + "\n")
    return sites


def save_best_attention(run: RunDir, cfg: Config) -> None:
    """best-attention.json, where the run has a best checkpoint and not the file yet: the
    first non-empty validation sentence translated greedily by that checkpoint, with its
    attention (nothing where the model finished no translation)."""
    if run.best_attention.is_file() or not run.checkpoint("best").is_file():
        return
    corpus = cfg.data.valid_corpora[0]
    sources = read_corpus(corpus, *cfg.data.pair(corpus)).src
    sentence = next(line for line in sources if line.strip())
    into = cfg.data.tgt_lang(corpus)
    best = Translator.load(run.root, "best", threads=_run_threads(), tgt_lang=into, **GREEDY_SEARCH)
    amap = best.attention_map(sentence)
    if amap is not None:
        saved = {
            "sentence": sentence,
            "translation": amap.translation,
            "source": amap.src_pieces,
            "target": amap.tgt_pieces,
            "weights": amap.weights.tolist(),
        }
        atomic_write_text(run.best_attention, json.dumps(saved) + "\n")


def check_kept_attention(run: RunDir) -> None:
    """Raise ValueError naming a damaged attention file that cannot be measured again."""
    kept: list[tuple[Path, Callable[[object], bool], Path]] = [
        (run.initial_attention, _is_sites, run.checkpoint("last")),
        (run.best_attention, _is_heatmap, run.checkpoint("best")),
    ]
    for path, whole, source in kept:
        if not path.is_file() or _reads(path, whole):
            continue
        if source.is_file():
            path.unlink()  # measured again from `source` when the report needs it
            continue
        raise ValueError(
            f"{path} is damaged and {source.name}, which it is measured from, is gone; "
            "restore the file, or train the run again"
        )


def _reads(path: Path, whole: Callable[[object], bool]) -> bool:
    try:
        return whole(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return False


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_sites(value: object) -> bool:
    """Site -> {"queries": str, "keys": str, "mean": {diagnostic: number}, ...}."""
    return isinstance(value, dict) and all(
        isinstance(entry, dict)
        and isinstance(entry.get("queries"), str)
        and isinstance(entry.get("keys"), str)
        and isinstance(entry.get("mean"), dict)
        and all(_number(v) for v in entry["mean"].values())
        for entry in value.values()
    )


def _is_heatmap(value: object) -> bool:
    """{"source": [piece], "target": [piece], "weights": numbers by target x source, or by
    target x head x source (a multi-head module's), ...}."""
    if not isinstance(value, dict):
        return False
    source, target, weights = value.get("source"), value.get("target"), value.get("weights")
    pieces = all(
        isinstance(p, list) and all(isinstance(x, str) for x in p) for p in (source, target)
    )
    if not (pieces and isinstance(weights, list) and len(weights) == len(target)):
        return False
    width = len(source)
    if all(_is_row(r, width) for r in weights):
        return True
    heads = len(weights[0]) if isinstance(weights[0], list) else 0
    return heads > 0 and all(
        isinstance(h, list) and len(h) == heads and all(_is_row(r, width) for r in h)
        for h in weights
    )


def _is_row(value: object, width: int) -> bool:
    return isinstance(value, list) and len(value) == width and all(map(_number, value))


def _run_threads() -> int:
    """The threads the run trained on: its files are then the same whatever else the
    machine runs (a translator's default follows the CPUs free)."""
    return torch.get_num_threads()
