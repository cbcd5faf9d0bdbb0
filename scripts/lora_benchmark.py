"""LoRA against full fine-tuning on Multi30k de->en (docs/trained-models.md#lora): the
Transformer recipe (float32) trained 1,500 updates on the first 10,000 training pairs, then
fine-tuned 1,000 updates on the other 19,000 from its best checkpoint (`train.init_from`'s
default) with every weight, with LoRA rank 8 and with rank 32 (q, k, v and o of every
attention), seeds 1 and 2; the last checkpoint tested.

    python scripts/lora_benchmark.py train [--only NAME ...]   # resumable
    python scripts/lora_benchmark.py table                     # markdown

`train` splits data/multi30k/train into data/multi30k-split/ (first), then trains what is
missing into docs/results/lora/runs/; a killed `train` goes on where it stopped. `table`
prints each kind's test BLEU, trained parameters and checkpoint size (best.pt: the weights,
or a LoRA run's adapters). The runs train on one thread, to share the cores with other
work; their speeds are measured apart, on a quiet machine, with `scripts/bench.py train`
(docs/trained-models.md#lora).
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

from benchmark_runs import finished, main, seq2seq, sets

from seq2seq.files import atomic_write_text

RUNS = Path("docs/results/lora/runs")
SPLIT = Path("data/multi30k-split")
BASE_PAIRS = 10_000
SEEDS = (1, 2)
KINDS = {"full": None, "lora-8": 8, "lora-32": 32}
TEST_SETS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")
FIXED = ["train.precision=fp32", "train.max_time=null", "train.patience=null"]
FIXED += ["train.test_checkpoint=last", "train.threads=1"]


def split() -> None:
    """The training pairs' first 10,000 as SPLIT/base, the others as SPLIT/rest (each file
    whole or not there: rest.en, written last, says the split is done)."""
    SPLIT.mkdir(parents=True, exist_ok=True)
    for lang in ("de", "en"):
        with gzip.open(f"data/multi30k/train.{lang}.gz", "rt", encoding="utf-8") as lines:
            kept = lines.readlines()
        atomic_write_text(SPLIT / f"base.{lang}", "".join(kept[:BASE_PAIRS]))
        atomic_write_text(SPLIT / f"rest.{lang}", "".join(kept[BASE_PAIRS:]))


def train_runs(only: list[str]) -> None:
    """The base model, then each fine-tuning not finished."""
    if not (SPLIT / "rest.en").is_file():
        split()
    base = RUNS / "base"
    if not finished(base):
        budget = ["train.max_steps=1500", f"data.train={SPLIT / 'base'}", "name=base"]
        seq2seq(
            "train",
            "configs/multi30k_transformer.yaml",
            *sets(*FIXED, *budget),
            "--run-dir",
            str(base),
        )
    for seed in SEEDS:
        for kind, rank in KINDS.items():
            name = f"{kind}-seed{seed}"
            run = RUNS / name
            if finished(run) or (only and name not in only):
                continue
            settings = [*FIXED, "train.max_steps=1000", f"data.train={SPLIT / 'rest'}"]
            settings += [f"train.init_from={base}", f"seed={seed}", f"name={name}"]
            if rank is not None:
                settings.append(f"train.lora={{rank: {rank}, alpha: {2 * rank}}}")
            print(f"training {name}", flush=True)
            seq2seq("train", str(base / "config.yaml"), *sets(*settings), "--run-dir", str(run))


def row(kind: str) -> str:
    runs = [RUNS / f"{kind}-seed{seed}" for seed in SEEDS]
    if not all(map(finished, runs)):
        return f"| {kind} | (not finished) |"
    scores = [json.loads((run / "test/scores.json").read_text()) for run in runs]
    bleu = [statistics.fmean(s[test]["bleu"] for s in scores) for test in TEST_SETS]
    summary = json.loads((runs[0] / "summary.json").read_text())
    size = (runs[0] / "checkpoints/best.pt").stat().st_size / 2**20  # weights alone
    trained = summary.get("trained_parameters", summary["parameters"])
    cells = [*(f"{b:.2f}" for b in bleu), f"{trained:,}", f"{size:.1f} MiB"]
    return f"| {kind} | " + " | ".join(cells) + " |"


def table() -> str:
    head = ["fine-tuning", *TEST_SETS, "trained parameters", "checkpoint"]
    rows = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    return "\n".join([*rows, *(row(kind) for kind in KINDS)])


if __name__ == "__main__":
    main(__doc__, train_runs, table)
