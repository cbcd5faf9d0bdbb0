"""Many language pairs in one model against a model per pair, on Multi30k
(docs/benchmarks.md#many-language-pairs): the attention study's small Transformer
(configs/study/transformer.yaml) as a many-to-one model (cs, de, fr -> en) and a one-to-many
model (en -> cs, de, fr), configs/multilingual/, against the bilingual model of each pair,
2 seeds, test BLEU per pair and test set.

    python scripts/multilingual_benchmark.py train [--only NAME ...]   # resumable
    python scripts/multilingual_benchmark.py table                     # markdown

`train` trains what is missing into docs/results/multilingual/runs/ (run it from the
repository root, with Multi30k in data/multi30k: scripts/prepare_multi30k.py), in order:
each multilingual model to 1,500 updates (the study's budget: the same updates as one
bilingual model), each bilingual model this study has not trained (cs-en, en-cs, en-fr;
de-en, fr-en and en-de are the study's `multihead` runs, read from docs/results/), then
each multilingual model on to 4,500 updates (about the time of its three bilingual models
together: a copy of its 1,500-update run, resumed, which equals a run trained straight).
A killed `train` goes on where it stopped when run again. `table` prints what is there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from benchmark_runs import bleu, cell, finished, main, seq2seq

RUNS = Path("docs/results/multilingual/runs")
SEEDS = (1, 2)
BUDGET, LONG = 1500, 4500
MULTILINGUAL = {"many-to-one": ("cs", "de", "fr"), "one-to-many": ("cs", "de", "fr")}
TEST_SETS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")
# The bilingual runs of the attention study (its Transformer baseline), by pair.
STUDY = {
    "de-en": "docs/results/attention-transformer-v2/runs/attention.type=multihead,seed={seed}",
    "fr-en": "docs/results/attention-transformer-v2-fren/runs/attention.type=multihead,seed={seed}",
    "en-de": "docs/results/attention-transformer-v2-ende/runs/attention.type=multihead,seed={seed}",
}
OWN_BILINGUAL = ("cs-en", "en-cs", "en-fr")


def pairs(model: str) -> list[str]:
    """The pairs a multilingual model translates, as runs name them."""
    languages = MULTILINGUAL[model]
    return [f"{lang}-en" if model == "many-to-one" else f"en-{lang}" for lang in languages]


def test_sets(pair: str) -> list[str]:
    """The test sets a pair has (Czech: test_2016_flickr alone)."""
    return TEST_SETS[:1] if "cs" in pair else list(TEST_SETS)


def train_runs(only: list[str]) -> None:
    """Every missing run, in the order of the module's docstring; `only`: those named."""
    jobs = []
    for seed in SEEDS:
        for model in MULTILINGUAL:
            config = f"configs/multilingual/{model.replace('-', '_')}.yaml"
            jobs.append((f"{model}-{BUDGET}-seed{seed}", ["--config", config], seed))
        for pair in OWN_BILINGUAL:
            src, tgt = pair.split("-")
            sets = ["--set", f"data.src={src}", "--set", f"data.tgt={tgt}"]
            sets += [
                "--set",
                f"train.max_steps={BUDGET}",
                "--set",
                "train.attention_diagnostics=true",
            ]
            if "cs" in pair:  # Czech has no 2017 test sets
                sets += ["--set", "data.test=[data/multi30k/test_2016_flickr]"]
            jobs.append(
                (
                    f"bilingual-{pair}-seed{seed}",
                    ["--config", "configs/study/transformer.yaml", *sets],
                    seed,
                )
            )
    for seed in SEEDS:
        for model in MULTILINGUAL:
            config = f"configs/multilingual/{model.replace('-', '_')}.yaml"
            sets = ["--config", config, "--set", f"train.max_steps={LONG}"]
            jobs.append((f"{model}-{LONG}-seed{seed}", sets, seed))
    for name, args, seed in jobs:
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
        seq2seq(
            "train", *args, "--set", f"seed={seed}", "--set", f"name={name}", "--run-dir", str(run)
        )


def bilingual_run(pair: str, seed: int) -> Path:
    return (
        Path(STUDY[pair].format(seed=seed))
        if pair in STUDY
        else RUNS / f"bilingual-{pair}-seed{seed}"
    )


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


def hours(run: Path) -> float | None:
    """A finished run's training hours; None before it finished."""
    summary = json.loads((run / "summary.json").read_text()) if finished(run) else None
    return None if summary is None else summary["train_seconds"] / 3600


def times() -> str:
    """The training hours of each kind of run (mean of the seeds; the machine was shared
    with other runs, so they compare only roughly)."""
    kinds = {
        f"bilingual {pair}": [bilingual_run(pair, s) for s in SEEDS]
        for pair in (*STUDY, *OWN_BILINGUAL)
    }
    for model in MULTILINGUAL:
        for steps in (BUDGET, LONG):
            kinds[f"{model}, {steps:,} updates"] = [
                RUNS / f"{model}-{steps}-seed{s}" for s in SEEDS
            ]
    rows = ["| run | training hours (each seed) |", "|---|---:|"]
    for kind, runs in kinds.items():
        found = [hours(run) for run in runs]
        shown = " / ".join("-" if h is None else f"{h:.2f}" for h in found)
        rows.append(f"| {kind} | {shown} |")
    return "\n".join(rows)


if __name__ == "__main__":
    main(__doc__, train_runs, lambda: f"{table()}\n\n{times()}")
