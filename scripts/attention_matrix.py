"""Train every attention type in every architecture and print the table of test scores.

    python scripts/attention_matrix.py [--task toy|multi30k] [--jobs 2] [--set KEY=VALUE]

Each cell is an ordinary run directory, OUT/ARCH-TYPE (OUT defaults to
runs/attention-matrix-TASK), trained with `seq2seq train` on the architecture's config
for the task with `model.attention.type` set; a cell whose test/scores.json exists is
not trained again, and an interrupted one resumes. Each architecture's tokenizer is
trained once and copied into its cells. Prints a Markdown table of the first test set's
BLEU and chrF and writes it, with the scores, to OUT/matrix.md and OUT/matrix.json.

toy (generated first if data/toy is missing) is checked: every type but `none` reaches
test BLEU >= 90, and `none` stays at least 20 BLEU below the weakest of them. multi30k
(prepared with scripts/prepare_multi30k.py) is checked only for running without error;
give it a budget, e.g. --set train.max_time=3m.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from seq2seq.attention import attention_names  # noqa: E402
from seq2seq.checkpoint import RunDir  # noqa: E402
from seq2seq.config import load_config  # noqa: E402
from seq2seq.data.toy import make_toy_corpus  # noqa: E402
from seq2seq.sweep.directory import (  # noqa: E402
    RunState,
    install_tokenizer,
    run_state,
    shared_tokenizer,
)

CONFIGS = {
    "toy": {"rnn": "configs/demo.yaml", "transformer": "configs/demo_transformer.yaml"},
    "multi30k": {
        "rnn": "configs/multi30k_rnn.yaml",
        "transformer": "configs/multi30k_transformer.yaml",
    },
}
ARCHS = ["rnn", "transformer"]
PASS_BLEU = 90.0
NONE_MARGIN = 20.0


def architecture_tokenizer(config: str, overrides: list[str], out: Path, arch: str) -> Path:
    """The config's tokenizer, trained once for all cells: they differ only in attention."""
    cfg = load_config(ROOT / config, overrides)
    return shared_tokenizer(cfg, cfg.seed, out / f"tokenizer-{arch}")


def train_cell(config: str, arch: str, kind: str, out: Path, overrides: list[str]) -> dict:
    """Train one cell unless it is done; returns its test scores and wall-clock seconds."""
    run = out / f"{arch}-{kind}"
    scores = run / "test" / "scores.json"
    seconds = None
    if run_state(RunDir(run)) is not RunState.FINISHED:
        install_tokenizer(out / f"tokenizer-{arch}", RunDir(run))  # kept when resuming
        command = [
            sys.executable, "-m", "seq2seq", "train", "--config", config,
            "--run-dir", str(run), "--set", f"model.attention.type={kind}",
            "--set", f"name=matrix-{arch}-{kind}",
        ]  # fmt: skip
        for override in overrides:
            command += ["--set", override]
        started = time.time()
        with open(out / f"{arch}-{kind}.log", "w", encoding="utf-8") as log:
            done = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        seconds = time.time() - started
        if done.returncode != 0:
            return {"error": f"exit {done.returncode}, see {arch}-{kind}.log"}
    test = next(iter(json.loads(scores.read_text(encoding="utf-8")).values()))
    return {"bleu": test["bleu"], "chrf": test["chrf"], "seconds": seconds}


def verdicts(results: dict[str, dict[str, dict]]) -> dict[str, bool]:
    """Per architecture: every type but none >= 90 BLEU, none 20 below the weakest."""
    passed = {}
    for arch, cells in results.items():
        scores = {kind: cell.get("bleu") for kind, cell in cells.items()}
        attending = [s for kind, s in scores.items() if kind != "none"]
        ok = all(s is not None and s >= PASS_BLEU for s in attending)
        if "none" in scores and attending and ok:
            ok = scores["none"] is not None and scores["none"] <= min(attending) - NONE_MARGIN
        passed[arch] = ok
    return passed


def table(results: dict[str, dict[str, dict]], kinds: list[str]) -> str:
    archs = list(results)
    lines = [
        "| attention | " + " | ".join(f"{a} BLEU | {a} chrF" for a in archs) + " |",
        "|---|" + "---:|---:|" * len(archs),
    ]
    for kind in kinds:
        cells = []
        for arch in archs:
            cell = results[arch][kind]
            if "error" in cell:
                cells += [cell["error"], ""]
            else:
                cells += [f"{cell['bleu']:.2f}", f"{cell['chrf']:.2f}"]
        lines.append(f"| `{kind}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=list(CONFIGS), default="toy")
    parser.add_argument("--out", type=Path, help="default: runs/attention-matrix-TASK")
    parser.add_argument("--archs", nargs="+", default=ARCHS, choices=ARCHS)
    parser.add_argument("--types", nargs="+", default=attention_names(), metavar="TYPE")
    parser.add_argument("--jobs", type=int, default=1, help="cells trained at once")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override for every cell, e.g. train.threads=1")  # fmt: skip
    args = parser.parse_args()
    unknown = sorted(set(args.types) - set(attention_names()))
    if unknown:
        parser.error(f"unknown attention types {unknown}; known: {', '.join(attention_names())}")
    if args.task == "toy" and not (ROOT / "data/toy/train.src").is_file():
        make_toy_corpus(ROOT / "data/toy", seed=1, train=20000, valid=300, test=300, max_words=16)
    out = (args.out or ROOT / f"runs/attention-matrix-{args.task}").resolve()
    out.mkdir(parents=True, exist_ok=True)

    cells = [(arch, kind) for arch in args.archs for kind in args.types]
    configs = CONFIGS[args.task]
    for arch in args.archs:
        architecture_tokenizer(configs[arch], args.set, out, arch)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done = pool.map(lambda cell: train_cell(configs[cell[0]], *cell, out, args.set), cells)
        flat = dict(zip(cells, done, strict=True))
    results = {arch: {kind: flat[arch, kind] for kind in args.types} for arch in args.archs}

    if args.task == "toy":
        passed = verdicts(results)
        rule = f"every type but none >= {PASS_BLEU:.0f} BLEU, none {NONE_MARGIN:.0f} below"
    else:
        passed = {a: all("error" not in c for c in cells.values()) for a, cells in results.items()}
        rule = "every type trained and was scored without error"
    skipped = [kind for kind in attention_names() if kind not in args.types]
    if skipped:  # the rule is about the whole family: a subset can fail, not pass
        passed = {arch: None if ok else False for arch, ok in passed.items()}
        rule = f"no verdict: {', '.join(skipped)} not run"
    verdict = {True: "PASS", False: "FAIL", None: "PARTIAL"}
    text = (
        table(results, args.types)
        + "\n\n"
        + "\n".join(f"{arch}: {verdict[ok]} ({rule})" for arch, ok in passed.items())
    )
    print(text)
    (out / "matrix.md").write_text(text + "\n", encoding="utf-8")
    (out / "matrix.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    sys.exit(1 if False in passed.values() else 0)


if __name__ == "__main__":
    main()
