"""`scripts/bench.py train`, `losses` and `diagnostics`: what a training update costs.

`train` trains the config's model for --warmup updates, then times --steps updates (data,
forward, backward, clipping, optimizer step; no validation) and reports target and
source+target tokens/s (pieces + EOS, padding excluded, as the JoeyNMT harness counts),
the padding share of the batches, and the model FLOP utilisation: training FLOPs per
target token counted analytically (6 x the weights of every matrix product a token goes
through: encoder weights per source token, decoder and output weights per target token;
attention scores and element-wise work left out) times tokens/s, over a matmul peak
measured on the spot in the same dtype. The tokenizer is trained into a temporary run
directory first (or reused with --tokenizer DIR). With --compile the model runs under
torch.compile, whose compiling falls in the warm-up (its seconds are reported).

`losses` gives the loss of each of the first --steps updates of a run from its start (the
config's seed, dropout on): two commits that compute the same arithmetic give the same
curve.

`diagnostics` times the attention diagnostics' pass over the validation set (what a
validation with them adds to one without) against the training between two validations
(train.valid_every updates) and against the validation's teacher-forced loss pass, in
--repeats interleaved rounds, and reports medians and ranges.

Each runs in a fresh process (bench.py runs it so, and adds its peak resident memory).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def matmul_peak_gflops(dtype_name: str, device: str = "cpu", seconds: float = 3.0) -> float:
    """Large square matmuls on this device now, in the training dtype: the MFU denominator
    (2048-wide on a CPU, 8192-wide on a GPU, where smaller ones leave it part idle)."""
    import torch

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    dtype = dtypes.get(dtype_name, torch.float32)
    size = 8192 if device == "cuda" else 2048
    a, b = (torch.randn(size, size, dtype=dtype, device=device) for _ in range(2))
    a @ b  # warm-up
    synchronize(device)
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(10 if device == "cuda" else 1):  # a GPU queues them: count in tens
            a @ b
            done += 1
        synchronize(device)
    return 2 * size**3 * done / (time.perf_counter() - started) / 1e9


def synchronize(device: str) -> None:
    """Wait for the GPU's queued work, so that a clock read after it counts it."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


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


def run_updates(trainer, batches: list[list[int]]) -> float:
    """Train on `batches` -> their summed loss per target token. Also drives the trainers
    of commits before `Trainer.train_batches` (`bench.py compare --base`, the GPU's
    before-and-after), whose `train_step` took the batch's indices."""
    if hasattr(trainer, "train_batches"):
        return trainer.train_batches(batches).loss
    total = 0.0
    for indices in batches:
        loss, _ = trainer.train_step(indices)
        trainer.progress.step += 1  # the schedule reads it
        total += float(loss)
    return total


def profile_updates(trainer, batches: list[list[int]], rows: int) -> dict:
    """torch.profiler over these updates, after the timed ones (its overhead is not in
    the figures): the table of the `rows` costliest operators to stderr, and on a GPU
    where an update's time goes (`gpu_profile`)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if trainer.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    synchronize(trainer.device.type)
    started = time.perf_counter()
    with profile(activities=activities) as profiler:
        run_updates(trainer, batches)
        synchronize(trainer.device.type)
    seconds = time.perf_counter() - started
    on_gpu = trainer.device.type == "cuda"
    order = "self_cuda_time_total" if on_gpu else "self_cpu_time_total"
    table = profiler.key_averages().table(sort_by=order, row_limit=rows)
    updates = len(batches) // getattr(trainer.cfg.train, "accumulate", 1)
    print(f"profile of {updates} updates:\n{table}", file=sys.stderr)
    if not on_gpu:
        return {}
    return {"gpu_profile": gpu_profile(profiler.events(), updates, seconds)}


def gpu_profile(events, updates: int, seconds: float) -> dict:
    """Per update: wall time, device time (the union of its kernels' and copies'
    intervals), the device's idle share and its longest idle gap, kernels, launch calls
    (one graph launch counts one), and the host's waits for the device (synchronize calls:
    behind every `.item()`, `bool()` or copy of a device value to the host)."""
    device = sorted(
        (e.time_range.start, e.time_range.end)
        for e in events
        if str(e.device_type).endswith("CUDA") and e.time_range.end > e.time_range.start
    )
    busy, gaps, end = 0.0, [], None
    for start, stop in device:
        if end is not None and start > end:
            gaps.append(start - end)
        if end is None or start > end:
            busy += stop - start
        elif stop > end:
            busy += stop - end
        end = stop if end is None else max(end, stop)
    names = [e.name for e in events if str(e.device_type).endswith("CPU")]
    launches = sum(
        n.startswith(("cudaLaunchKernel", "cuLaunchKernel", "cudaGraphLaunch")) for n in names
    )
    span = (device[-1][1] - device[0][0]) / 1e3 if device else 0.0  # ms
    return {
        "updates": updates,
        "wall_ms_per_update": round(seconds * 1e3 / updates, 3),
        "device_busy_ms_per_update": round(busy / 1e3 / updates, 3),
        "device_idle_share": round(1 - busy / 1e3 / span, 4) if span else None,
        "longest_idle_gap_ms": round(max(gaps) / 1e3, 3) if gaps else 0.0,
        "kernels_per_update": round(len(device) / updates, 1),
        "launch_calls_per_update": round(launches / updates, 1),
        "host_waits_per_update": round(sum("Synchronize" in n for n in names) / updates, 2),
    }


def cuda_graphs(trainer) -> dict:
    """How many batch shapes the updates captured as CUDA graphs, and the seconds it took."""
    graphs = getattr(getattr(trainer, "update", None), "graphs", None)
    if graphs is None:
        return {}
    return {"cuda_graphs": len(graphs.graphs), "capture_seconds": round(graphs.capture_seconds, 2),
            "cuda_graphs_failure": graphs.failure}  # fmt: skip


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


def training_speed(
    trainer, timed: list[list[int]], updates: int, seconds: float, precision: str
) -> dict:
    """Speeds, padding and model FLOP utilisation of `updates` updates on the `timed`
    batches that took `seconds`; on a GPU also the utilisation against its bf16 peak and
    the peak memory allocated."""
    import torch

    built = [trainer.data.train.batch(b) for b in timed]
    src = sum(batch.n_src_tokens for batch in built)
    tgt = sum(batch.n_tgt_tokens for batch in built)
    padded = sum(batch.src.numel() + batch.tgt_in.numel() for batch in built)
    source_side, target_side = matmul_weights(trainer.model)
    flops_per_target = 6 * (target_side + source_side * src / tgt)
    device = trainer.device.type
    peak = matmul_peak_gflops(precision, device)
    speed = tgt / seconds
    result = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "seconds": round(seconds, 2),
        "target_tokens_per_s": round(speed, 1),
        "tokens_per_s": round((src + tgt) / seconds, 1),
        "target_tokens_per_update": round(tgt / updates, 1),
        "padding_ratio": round(1 - (src + tgt) / padded, 4),
        "mflop_per_target_token": round(flops_per_target / 1e6, 3),
        "matmul_peak_gflops": round(peak, 1),
        "mfu": round(flops_per_target * speed / (peak * 1e9), 5),
    }
    if device == "cuda":
        bf16_peak = peak if precision == "bf16" else matmul_peak_gflops("bf16", device)
        result["mfu_of_bf16_peak"] = round(flops_per_target * speed / (bf16_peak * 1e9), 5)
        result["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return result


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
        losses = [run_updates(trainer, [indices]) for indices in batches]
    return {"mode": "losses", "config": str(args.config), "threads": args.threads,
            "steps": args.steps, "losses": losses}  # fmt: skip


def measure_train(args: argparse.Namespace) -> dict:
    """Runs in its own process: build the run, warm up, time --steps updates."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg, trainer = new_trainer(args, tmp)
        per = getattr(cfg.train, "accumulate", 1)  # batches an update (train.accumulate)
        warmup, steps = args.warmup * per, args.steps * per
        needed = warmup + steps + (args.profile and args.profile_updates * per)
        batches = training_batches(trainer, cfg.train.max_epochs, needed)
        if args.compile:  # tried for issue 33: see docs/benchmarks.md
            import torch

            trainer.network = torch.compile(trainer.network, dynamic=True)
        started = time.perf_counter()
        run_updates(trainer, batches[:warmup])
        synchronize(trainer.device.type)
        warmup_seconds = time.perf_counter() - started
        timed = batches[warmup : warmup + steps]
        started = time.perf_counter()
        run_updates(trainer, timed)
        synchronize(trainer.device.type)
        seconds = time.perf_counter() - started
        profiled = {}
        if args.profile:
            profiled = profile_updates(trainer, batches[warmup + steps :], args.profile)
        speed = training_speed(trainer, timed, args.steps, seconds, cfg.train.precision)
    return {
        "mode": "train",
        "config": str(args.config),
        "arch": cfg.model.arch,
        "precision": cfg.train.precision,
        "threads": args.threads,
        "steps": args.steps,
        "compiled": args.compile,
        "warmup_seconds": round(warmup_seconds, 2),
        **speed,
        **cuda_graphs(trainer),
        **profiled,
    }


def measure_diagnostics(args: argparse.Namespace) -> dict:
    """Runs in its own process: the attention diagnostics' cost (train.attention_diagnostics)
    against the training between two validations (train.valid_every updates). --repeats
    rounds, interleaved: --steps updates, the validation's teacher-forced loss pass, the
    diagnostics' pass over the validation set (what validating with them adds); medians
    and ranges."""
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
        run_updates(trainer, [batches.pop()])  # warm-up
        for rep in range(args.repeats):
            started = time.perf_counter()
            run_updates(trainer, batches[rep * args.steps : (rep + 1) * args.steps])
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
        "validation_pairs": sum(len(valid.src) for valid in trainer.data.valid),
        **{f"{name}_s": round(value, 3) for name, value in median.items()},
        **{f"{name}_s_range": [round(min(v), 3), round(max(v), 3)] for name, v in times.items()},
        "train_s_between_validations": round(between, 1),
        "diagnostics_share_of_training": round(median["diagnostics"] / between, 5),
        "diagnostics_over_loss_pass": round(median["diagnostics"] / median["loss_pass"], 3),
    }
