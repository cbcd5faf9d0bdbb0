"""Many language pairs in one model against a model per pair, on Multi30k
(docs/benchmarks.md#many-language-pairs): the attention study's small Transformer
(configs/study/transformer.yaml) as a many-to-one model (cs, de, fr -> en) and a one-to-many
model (en -> cs, de, fr), configs/multilingual/, against the bilingual model of each pair,
2 seeds, test BLEU per pair and test set.

    python scripts/multilingual_benchmark.py train [--only NAME ...] [--jobs N]  # resumable
    python scripts/multilingual_benchmark.py table                               # markdown

`train` trains what is missing into docs/results/multilingual/runs/ (run it from the
repository root, with Multi30k in data/multi30k: scripts/prepare_multi30k.py): each
multilingual model to 1,500 updates (the study's budget: the same updates as one bilingual
model) and then on to 4,500 (the updates of its three bilingual models together: a copy of
its 1,500-update run, resumed, which equals a run trained straight), and the bilingual
model of each of the six pairs. Every run of the table is trained here, on one machine:
runs of two machines are never mixed in one comparison. `--jobs N` trains N at once (a GPU
machine; each run's output then goes to runs/logs/multilingual/NAME.log). A killed `train`
goes on where it stopped when run again. `table` prints what is there.
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmark_runs import bleu, cell, finished, main, seq2seq, sets

RUNS = Path("docs/results/multilingual/runs")
LOGS = Path("runs/logs/multilingual")
SEEDS = (1, 2)
BUDGET, LONG = 1500, 4500
MULTILINGUAL = {"many-to-one": ("cs", "de", "fr"), "one-to-many": ("cs", "de", "fr")}
TEST_SETS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")
BILINGUAL = ("cs-en", "de-en", "fr-en", "en-cs", "en-de", "en-fr")
Job = tuple[str, list[str], int]  # a run's name, its `train` arguments, its seed


def pairs(model: str) -> list[str]:
    """The pairs a multilingual model translates, as runs name them."""
    languages = MULTILINGUAL[model]
    return [f"{lang}-en" if model == "many-to-one" else f"en-{lang}" for lang in languages]


def test_sets(pair: str) -> list[str]:
    """The test sets a pair has (Czech: test_2016_flickr alone)."""
    return TEST_SETS[:1] if "cs" in pair else list(TEST_SETS)


def multilingual_chain(model: str, seed: int) -> list[Job]:
    """A multilingual model's 1,500-update run, then the 4,500-update run it goes on to."""
    config = ["--config", f"configs/multilingual/{model.replace('-', '_')}.yaml"]
    return [
        (f"{model}-{BUDGET}-seed{seed}", config, seed),
        (f"{model}-{LONG}-seed{seed}", [*config, *sets(f"train.max_steps={LONG}")], seed),
    ]


def bilingual_job(pair: str, seed: int) -> Job:
    src, tgt = pair.split("-")
    assignments = [f"data.src={src}", f"data.tgt={tgt}", f"train.max_steps={BUDGET}"]
    if "cs" in pair:  # Czech has no 2017 test sets
        assignments.append("data.test=[data/multi30k/test_2016_flickr]")
    args = ["--config", "configs/study/transformer.yaml", *sets(*assignments)]
    return (f"bilingual-{pair}-seed{seed}", args, seed)


def train_chain(chain: list[Job], only: list[str], log: bool) -> None:
    """Each missing run of `chain` in turn (`only`: those named), a longer run starting from
    a copy of the shorter one before it."""
    for name, args, seed in chain:
        run = RUNS / name
        if finished(run) or (only and name not in only):
            continue
        short = RUNS / name.replace(f"-{LONG}-", f"-{BUDGET}-")
        if short != run and not run.exists():  # go on from the 1,500-update run
            if not finished(short):
                continue
            copy = run.with_name(run.name + ".copy")
            shutil.rmtree(copy, ignore_errors=True)  # a copy a kill cut short
            # Not its tests and summary: those of the longer run come when it finishes.
            shutil.copytree(short, copy, ignore=shutil.ignore_patterns("test", "summary.json"))
            copy.rename(run)
        print(f"training {name}", flush=True)
        command = [*args, *sets(f"seed={seed}", f"name={name}"), "--run-dir", str(run)]
        seq2seq("train", *command, log=LOGS / f"{name}.log" if log else None)
        print(f"finished {name}", flush=True)


def train_runs(only: list[str], jobs: int) -> None:
    """Every missing run (`only`: those named), `jobs` at once, the multilingual models'
    chains first (the longest)."""
    chains = [multilingual_chain(m, seed) for seed in SEEDS for m in MULTILINGUAL]
    chains += [[bilingual_job(pair, seed)] for seed in SEEDS for pair in BILINGUAL]
    with ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(train_chain, chain, only, jobs > 1) for chain in chains]
    for future in futures:
        future.result()  # a run that failed fails `train`, once every other has ended


def bilingual_run(pair: str, seed: int) -> Path:
    return RUNS / f"bilingual-{pair}-seed{seed}"


def table() -> str:
    rows = [
        f"| pair | test set | bilingual, {BUDGET:,} updates | multilingual, {BUDGET:,} "
        f"| multilingual, {LONG:,} |",
        "|---|---|---:|---:|---:|",
    ]
    for model in MULTILINGUAL:
        for pair in pairs(model):
            for test in test_sets(pair):
                ours = f"{test}.{pair}"
                row = [
                    cell([bleu(bilingual_run(pair, seed), test) for seed in SEEDS]),
                    *(
                        cell([bleu(RUNS / f"{model}-{steps}-seed{seed}", ours) for seed in SEEDS])
                        for steps in (BUDGET, LONG)
                    ),
                ]
                rows.append(f"| {pair} ({model}) | {test} | " + " | ".join(row) + " |")
    return "\n".join(rows)


def minutes(run: Path) -> float | None:
    """A finished run's training minutes; None before it finished."""
    summary = json.loads((run / "summary.json").read_text()) if finished(run) else None
    return None if summary is None else summary["train_seconds"] / 60


def times() -> str:
    """The training minutes of each run, by kind (runs shared the machine, so they compare
    only roughly)."""
    kinds = {f"bilingual {pair}": [bilingual_run(pair, s) for s in SEEDS] for pair in BILINGUAL}
    for model in MULTILINGUAL:
        for steps in (BUDGET, LONG):
            kinds[f"{model}, {steps:,} updates"] = [
                RUNS / f"{model}-{steps}-seed{s}" for s in SEEDS
            ]
    rows = ["| run | training minutes (each seed) |", "|---|---:|"]
    for kind, runs in kinds.items():
        found = [minutes(run) for run in runs]
        shown = " / ".join("-" if h is None else f"{h:.1f}" for h in found)
        rows.append(f"| {kind} | {shown} |")
    return "\n".join(rows)


if __name__ == "__main__":
    main(__doc__, train_runs, lambda: f"{table()}\n\n{times()}", parallel=True)
