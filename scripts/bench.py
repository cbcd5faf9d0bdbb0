"""Benchmarks that print one JSON line per measurement, so results can be compared.

    python scripts/bench.py train --config configs/multi30k_transformer.yaml [--steps 50] \
        [--warmup 10] [--threads 2] [--set train.precision=bf16 ...] [--profile ROWS]

`train` trains the config's model for --warmup updates, then times --steps updates (data,
forward, backward, clipping, optimizer step; no validation) and reports target and
source+target tokens/s (pieces + EOS, padding excluded, as the JoeyNMT harness counts),
the padding share of the batches, peak resident memory, and the model FLOP utilisation:
training FLOPs per target token counted analytically (6 x the weights of every matrix
product a token goes through: encoder weights per source token, decoder and output
weights per target token; attention scores and element-wise work left out) times
tokens/s, over a matmul peak measured on the spot in the same dtype. The tokenizer is
trained into a temporary run directory first (or reused with --tokenizer DIR).

    python scripts/bench.py decode --run runs/multi30k-transformer \\
        --input data/multi30k/test_2016_flickr.de.gz [--ref data/multi30k/test_2016_flickr.en.gz] \\
        [--beam 1 5] [--threads 2] [--limit N] [--length-penalty A] \\
        [--engine torch torch-int8 ct2-float32 ct2-int8]

    python scripts/bench.py diagnostics --config configs/multi30k_rnn.yaml [--steps 10] \\
        [--repeats 3] [--threads 2] [--set ...]

`diagnostics` times the attention diagnostics' pass over the validation set (what a
validation with them adds to one without) against the training between two validations
(train.valid_every updates) and against the validation's teacher-forced loss pass, in
--repeats interleaved rounds, and reports medians and ranges.

`decode` translates the input with each engine and beam size after a warm-up (the first
50 lines), each in a fresh process so that its peak memory is its own, and reports
sentences/s, target tokens/s (output pieces + EOS), the peak resident memory, and with
--ref the BLEU and chrF of the output. `torch` is this project's decoder (`torch-int8`:
with int8 linear layers, `Translator.load(..., int8=True)`); `ct2-TYPE`
exports the run to CTranslate2 with TYPE weights (float32, int16, int8) into a temporary
directory first and decodes with it, on as many threads. A run whose config.yaml holds
keys that the measured seq2seq does not know (a newer run, measured with an older commit
under `compare`) is read without them, and the line lists them (`config_keys_left_out`).

    python scripts/bench.py losses --config configs/study/rnn.yaml [--steps 100]

`losses` prints the loss of each of the first --steps updates of a run from its start
(the config's seed, dropout on): two commits that compute the same arithmetic print the
same curve.

    python scripts/bench.py compare --base ../old-checkout [--repeat 3] -- train --config X

`compare` runs the measurement after `--` alternately with the seq2seq of `--base` and
with this checkout's (SEQ2SEQ_BENCH_CODE=DIR in the environment picks either by hand),
--repeat times each, prints every JSON line, then a summary line per measurement: the
median, minimum and maximum of each figure on each side and the ratio of the medians (new
over old); with `losses`, the largest relative difference between the two loss curves.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from inspect import signature
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The seq2seq that is measured: this checkout's, or the one `--code DIR` names (an older
# commit); an environment variable, so that the spawned measuring processes import it too.
CODE_VARIABLE = "SEQ2SEQ_BENCH_CODE"
sys.path.insert(0, os.environ.get(CODE_VARIABLE, str(ROOT)))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


ENGINES = ("torch", "torch-int8", "ct2-float32", "ct2-int16", "ct2-int8")


def load_translator(
    args: argparse.Namespace, engine: str, beam: int, exported: Path | None, run: Path
):
    """This project's Translator on `run` (the run as the measured code reads it), or
    CTranslate2 on its export."""
    options = {
        "beam": beam, "batch_tokens": args.batch_tokens, "length_penalty": args.length_penalty
    }  # fmt: skip
    if engine.startswith("torch"):
        from seq2seq.decode.translate import Translator

        int8 = {"int8": True} if engine == "torch-int8" else {}  # older commits lack it
        return Translator.load(run, args.checkpoint, **int8, **options)
    from seq2seq.decode.ctranslate2_engine import CTranslate2Translator

    return CTranslate2Translator.load(exported, threads=args.threads, **options)


def run_for_this_code(run: Path, directory: Path) -> tuple[Path, list[str]]:
    """The run as the measured seq2seq reads it, and the config keys left out for it.

    An older commit's schema lacks the keys that newer configs write (at their defaults,
    for a run trained without them): those are left out of a copy of config.yaml, beside
    links to the run's other files in `directory`. A run it reads as it is comes back as it is.
    """
    import yaml
    from pydantic import ValidationError

    import seq2seq.attention  # noqa: F401  (older commits validate attention types only after it)
    from seq2seq.config import Config

    config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    dropped: list[str] = []
    while True:
        try:
            Config.model_validate(config)
            break
        except ValidationError as error:
            unknown = [e["loc"] for e in error.errors() if e["type"] == "extra_forbidden"]
            if not unknown:
                break  # another problem: loading the run reports it
        for *parents, key in unknown:
            section = config
            for parent in parents:
                section = section[parent]
            del section[key]
            dropped.append(".".join(map(str, [*parents, key])))
    if not dropped:
        return run, []
    copy = directory / run.name
    copy.mkdir()
    for entry in run.iterdir():
        if entry.name != "config.yaml":
            (copy / entry.name).symlink_to(entry.resolve())
    (copy / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return copy, dropped


def measure_decode(args: argparse.Namespace, engine: str, beam: int, exported: Path | None) -> dict:
    """Runs in its own process: load the model, warm up, time one pass over the input."""
    import torch

    from seq2seq.data.corpus import read_lines
    from seq2seq.evaluate import score_corpus

    torch.set_num_threads(args.threads)
    lines = read_lines(args.input)[: args.limit]
    with tempfile.TemporaryDirectory() as directory:
        run, dropped = run_for_this_code(args.run, Path(directory))
        translator = load_translator(args, engine, beam, exported, run)
    cuda = getattr(translator, "device", None) is not None and translator.device.type == "cuda"
    translator.translate(lines[:50])
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    # What `seq2seq translate` asks for: no attention weights (older commits had no choice).
    options = (
        {"attention": False} if "attention" in signature(translator.hypotheses).parameters else {}
    )
    started = time.perf_counter()
    found = translator.hypotheses(lines, **options)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    outputs = [hyps[0] if hyps else None for hyps in found]
    tokens = sum(len(h.tokens) + 1 for h in outputs if h is not None)
    result = {
        "mode": "decode",
        "engine": engine,
        "run": str(args.run),
        "beam": beam,
        "sentences": len(lines),
        "seconds": round(seconds, 3),
        "sentences_per_s": round(len(lines) / seconds, 2),
        "target_tokens_per_s": round(tokens / seconds, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "device": "cuda" if cuda else "cpu",
        "threads": args.threads,
        "batch_tokens": translator.decode.batch_tokens,
        "length_penalty": translator.decode.length_penalty,
    }
    if dropped:
        result["config_keys_left_out"] = dropped
    if cuda:
        result["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    if args.ref:
        references = read_lines(args.ref)[: args.limit]
        scores = score_corpus([h.text if h else "" for h in outputs], references)
        result.update(bleu=round(scores.bleu, 2), chrf=round(scores.chrf, 2))
    return result


def export_for(args: argparse.Namespace, engine: str, directory: Path) -> Path | None:
    """The run exported with the engine's quantization into `directory` (None: torch)."""
    if engine.startswith("torch"):
        return None
    from seq2seq.decode.export import export_ctranslate2

    exported = directory / engine
    export_ctranslate2(args.run, exported, engine.removeprefix("ct2-"), args.checkpoint)
    return exported


def matmul_peak_gflops(dtype_name: str, seconds: float = 3.0, size: int = 2048) -> float:
    """Large square matmuls on this machine now, in the training dtype: the MFU denominator."""
    import torch

    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b  # warm-up
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        a @ b
        done += 1
    return 2 * size**3 * done / (time.perf_counter() - started) / 1e9


def matmul_weights(model) -> tuple[int, int]:
    """(source-side, target-side) weights used in matrix products per token.

    Modules under a top-level name starting with `encoder` run per source token; all the
    others (decoder, output) per target token. Memory projections of the decoder (RNN
    memory, cross-attention keys and values) also run per source token: with a length
    ratio near 1 the difference is small, and it is left out.
    """
    from torch import nn

    source = target = 0
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            weights = module.weight.numel()
        elif isinstance(module, nn.RNNBase):
            weights = sum(p.numel() for n, p in module.named_parameters() if "weight" in n)
        else:
            continue
        if name.startswith("encoder"):
            source += weights
        else:
            target += weights
    return source, target


PROFILED_STEPS = 10


def profile_updates(trainer, batches: list[list[int]], rows: int) -> None:
    """torch.profiler's table of the `rows` costliest operators over these updates, to
    stderr; run after the timed updates, so its overhead is not in the figures."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for indices in batches:
            trainer.train_step(indices)
    table = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)
    print(f"profile of {len(batches)} updates:\n{table}", file=sys.stderr)


def training_batches(trainer, epochs: int, needed: int) -> list[list[int]]:
    """The first `needed` batches of the training data, over as many epochs as it takes."""
    batches: list[list[int]] = []
    for epoch in range(epochs):
        if len(batches) >= needed:
            break
        batches += trainer.data.train.epoch(epoch)
    if len(batches) < needed:
        raise SystemExit(f"the corpus gives {len(batches)} batches; {needed} needed")
    return batches[:needed]


def training_speed(trainer, timed: list[list[int]], seconds: float, precision: str) -> dict:
    """Speeds, padding and model FLOP utilisation of `timed` updates that took `seconds`."""
    data = trainer.data.train
    src = sum(len(data.src[i]) + 1 for b in timed for i in b)
    tgt = sum(data.target_tokens(b) for b in timed)
    padded = sum(
        len(b) * (max(len(data.src[i]) for i in b) + 1 + max(len(data.tgt[i]) for i in b) + 1)
        for b in timed
    )
    source_side, target_side = matmul_weights(trainer.model)
    flops_per_target = 6 * (target_side + source_side * src / tgt)
    peak = matmul_peak_gflops(precision)
    speed = tgt / seconds
    return {
        "seconds": round(seconds, 2),
        "target_tokens_per_s": round(speed, 1),
        "tokens_per_s": round((src + tgt) / seconds, 1),
        "target_tokens_per_update": round(tgt / len(timed), 1),
        "padding_ratio": round(1 - (src + tgt) / padded, 4),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "mflop_per_target_token": round(flops_per_target / 1e6, 3),
        "matmul_peak_gflops": round(peak, 1),
        "mfu": round(flops_per_target * speed / (peak * 1e9), 5),
    }


def new_trainer(args: argparse.Namespace, directory: str):
    """The config's trainer on a fresh run in `directory`, with --tokenizer's if given."""
    import shutil

    from seq2seq.checkpoint import RunDir
    from seq2seq.config import load_config
    from seq2seq.train.distributed import World
    from seq2seq.train.run import build_trainer

    cfg = load_config(args.config, [*args.set, f"train.threads={args.threads}"])
    run = RunDir(Path(directory) / "run")
    if args.tokenizer:
        shutil.copytree(args.tokenizer, run.tokenizer)
    trainer = build_trainer(cfg, run, World())
    trainer.model.train()
    return cfg, trainer


def measure_losses(args: argparse.Namespace) -> dict:
    """Runs in its own process: the loss per target token of the first --steps updates."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg, trainer = new_trainer(args, tmp)
        batches = training_batches(trainer, cfg.train.max_epochs, args.steps)
        losses = []
        for indices in batches:
            loss, _ = trainer.train_step(indices)
            trainer.progress.step += 1  # the schedule reads it
            losses.append(float(loss))
    return {"mode": "losses", "config": str(args.config), "threads": args.threads,
            "steps": args.steps, "losses": losses}  # fmt: skip


def measure_train(args: argparse.Namespace) -> dict:
    """Runs in its own process: build the run, warm up, time --steps updates."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg, trainer = new_trainer(args, tmp)
        needed = args.warmup + args.steps + (args.profile and PROFILED_STEPS)
        batches = training_batches(trainer, cfg.train.max_epochs, needed)
        for indices in batches[: args.warmup]:
            trainer.train_step(indices)
        timed = batches[args.warmup : args.warmup + args.steps]
        started = time.perf_counter()
        for indices in timed:
            trainer.train_step(indices)
        seconds = time.perf_counter() - started
        if args.profile:
            profile_updates(trainer, batches[args.warmup + args.steps :], args.profile)
        speed = training_speed(trainer, timed, seconds, cfg.train.precision)
    return {
        "mode": "train",
        "config": str(args.config),
        "arch": cfg.model.arch,
        "precision": cfg.train.precision,
        "threads": args.threads,
        "steps": args.steps,
        **speed,
    }


def measure_diagnostics(args: argparse.Namespace) -> dict:
    """Runs in its own process: the attention diagnostics' cost (train.attention_diagnostics)
    against the training between two validations (train.valid_every updates). --repeats
    rounds, interleaved: --steps updates, the validation's teacher-forced loss pass, the
    diagnostics' pass over the validation set (what validating with them adds); medians
    and ranges."""
    import statistics

    from seq2seq.attention.diagnostics import measure_attention
    from seq2seq.checkpoint import RunDir
    from seq2seq.config import load_config
    from seq2seq.train.distributed import World
    from seq2seq.train.run import build_trainer

    cfg = load_config(args.config, [*args.set, f"train.threads={args.threads}"])
    times: dict[str, list[float]] = {"update": [], "loss_pass": [], "diagnostics": []}
    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trainer(cfg, RunDir(Path(tmp) / "run"), World())
        validator = trainer.validator
        batches = training_batches(trainer, cfg.train.max_epochs, args.steps * args.repeats + 1)
        trainer.model.train()
        trainer.train_step(batches.pop())  # warm-up
        for rep in range(args.repeats):
            started = time.perf_counter()
            for indices in batches[rep * args.steps : (rep + 1) * args.steps]:
                trainer.train_step(indices)
            times["update"].append((time.perf_counter() - started) / args.steps)
            started = time.perf_counter()
            validator.teacher_forced_loss(trainer.model)
            times["loss_pass"].append(time.perf_counter() - started)
            started = time.perf_counter()
            measure_attention(trainer.model, validator.pairs())
            times["diagnostics"].append(time.perf_counter() - started)
    median = {name: statistics.median(values) for name, values in times.items()}
    between = median["update"] * cfg.train.valid_every
    return {
        "mode": "diagnostics",
        "config": str(args.config),
        "threads": args.threads,
        "valid_every": cfg.train.valid_every,
        "validation_pairs": len(trainer.data.valid_src),
        **{f"{name}_s": round(value, 3) for name, value in median.items()},
        **{f"{name}_s_range": [round(min(v), 3), round(max(v), 3)] for name, v in times.items()},
        "train_s_between_validations": round(between, 1),
        "diagnostics_share_of_training": round(median["diagnostics"] / between, 5),
        "diagnostics_over_loss_pass": round(median["diagnostics"] / median["loss_pass"], 3),
    }


# The figures `compare` summarises, and the fields that say which measurement a line is.
COMPARED = ("target_tokens_per_s", "tokens_per_s", "sentences_per_s", "peak_rss_mb", "mfu", "bleu")
IDENTITY = ("mode", "config", "engine", "beam", "threads", "precision")


def run_side(code: Path, measurement: list[str]) -> list[dict]:
    """The JSON lines of one measurement by this script with the seq2seq of `code`."""
    env = {**os.environ, CODE_VARIABLE: str(code.resolve())}
    command = [sys.executable, str(Path(__file__).resolve()), *measurement]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def summarise(old: list[dict], new: list[dict]) -> dict:
    """Median, minimum and maximum of each figure on each side; new median over old."""
    if old[0]["mode"] == "losses":
        pairs = zip(old[0]["losses"], new[0]["losses"], strict=True)
        worst = max(abs(b - a) / max(abs(a), 1e-12) for a, b in pairs)
        return {**{k: old[0][k] for k in IDENTITY if k in old[0]}, "max_relative_diff": worst}
    summary = {k: old[0][k] for k in IDENTITY if k in old[0]}
    for key in COMPARED:
        if key not in old[0] or key not in new[0]:
            continue
        sides = {"old": [r[key] for r in old], "new": [r[key] for r in new]}
        for side, values in sides.items():
            summary[f"{key}_{side}"] = [statistics.median(values), min(values), max(values)]
        summary[f"{key}_ratio"] = round(
            statistics.median(sides["new"]) / max(statistics.median(sides["old"]), 1e-12), 3
        )
    return summary


def compare(base: Path, repeat: int, measurement: list[str]) -> None:
    """Old and new measured alternately, `repeat` times each, then the summary lines."""
    rows: dict[str, list[list[dict]]] = {"old": [], "new": []}
    for _ in range(repeat):
        for side, code in (("old", base), ("new", ROOT)):
            lines = run_side(code, measurement)
            for line in lines:
                print(json.dumps({"side": side, **line}), flush=True)
            rows[side].append(lines)
    for i in range(len(rows["old"][0])):  # one summary per line of a measurement
        old, new = ([lines[i] for lines in rows[side]] for side in ("old", "new"))
        print(json.dumps({"summary": True, **summarise(old, new)}), flush=True)


def add_train_options(mode: argparse.ArgumentParser, steps: int, help_steps: str) -> None:
    mode.add_argument("--config", type=Path, required=True, help="a run config")
    mode.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    mode.add_argument("--steps", type=int, default=steps, help=help_steps)
    mode.add_argument("--threads", type=int, default=2)
    mode.add_argument("--tokenizer", type=Path, help="a run's tokenizer/ to reuse")


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    decode = modes.add_parser("decode", help="translation speed per beam size")
    decode.add_argument("--run", type=Path, required=True, help="a trained run directory")
    decode.add_argument("--checkpoint", default="best")
    decode.add_argument("--input", type=Path, required=True, help="source lines (.gz is fine)")
    decode.add_argument("--ref", type=Path, help="references, to report BLEU and chrF")
    decode.add_argument("--beam", type=int, nargs="+", default=[1, 5])
    decode.add_argument("--batch-tokens", type=int, help="default: the run's decode.batch_tokens")
    decode.add_argument("--threads", type=int, default=2)
    decode.add_argument("--limit", type=int, help="only the first N lines")
    decode.add_argument("--length-penalty", type=float, help="default: the run's decode one")
    decode.add_argument(
        "--engine", nargs="+", choices=ENGINES, default=["torch"],
        help="torch-int8: int8 linear layers; ct2-*: the run exported to CTranslate2 with "
        "that weight type (the export extra)",
    )  # fmt: skip
    train = modes.add_parser("train", help="training throughput and model FLOP utilisation")
    add_train_options(train, 50, "timed updates")
    train.add_argument("--warmup", type=int, default=10, help="updates before timing")
    train.add_argument(
        "--profile", type=int, default=0, metavar="ROWS",
        help=f"then profile {PROFILED_STEPS} more updates; print the ROWS costliest operators",
    )  # fmt: skip
    diagnostics = modes.add_parser("diagnostics", help="attention diagnostics' cost")
    diagnostics.add_argument("--config", type=Path, required=True, help="a run config")
    diagnostics.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    diagnostics.add_argument("--steps", type=int, default=10, help="timed updates per round")
    diagnostics.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    diagnostics.add_argument("--threads", type=int, default=2)
    losses = modes.add_parser("losses", help="the loss of each of a run's first updates")
    add_train_options(losses, 100, "updates from the start")
    both = modes.add_parser("compare", help="a measurement on an older checkout and this one")
    both.add_argument("--base", type=Path, required=True, help="the older checkout's root")
    both.add_argument("--repeat", type=int, default=3, help="measurements per side")
    both.add_argument("measurement", nargs=argparse.REMAINDER, help="-- MODE OPTIONS...")
    args = parser.parse_args()
    for option in ("config", "tokenizer", "run", "input", "ref", "base"):
        path = getattr(args, option, None)
        if path is not None and not path.exists():
            parser.error(f"--{option} {path}: no such file or directory")
    return args


def main() -> None:
    from seq2seq.errors import UserError

    try:
        measure_as_asked(parse_arguments())
    except UserError as error:  # a bad config or run, found in a measuring process
        raise SystemExit(f"bench.py: {error}") from None


def measure_as_asked(args: argparse.Namespace) -> None:
    if args.mode == "compare":
        compare(args.base, args.repeat, [a for a in args.measurement if a != "--"])
        return
    context = multiprocessing.get_context("spawn")
    measure = {
        "train": measure_train, "losses": measure_losses, "diagnostics": measure_diagnostics
    }.get(args.mode)  # fmt: skip
    if measure is not None:
        with context.Pool(1) as pool:
            print(json.dumps(pool.apply(measure, (args,))), flush=True)
        return
    with tempfile.TemporaryDirectory() as directory:
        for engine in args.engine:
            exported = export_for(args, engine, Path(directory))
            for beam in args.beam:
                with context.Pool(1) as pool:
                    measured = pool.apply(measure_decode, (args, engine, beam, exported))
                print(json.dumps(measured), flush=True)


if __name__ == "__main__":
    main()
