"""`scripts/bench.py decode`: translation speed of this project's decoder and of
CTranslate2 on the same run.

Each engine and beam size translates the input after a warm-up (the first 50 lines), in a
fresh process (bench.py runs it so, and adds its peak resident memory), and reports
sentences/s, target tokens/s (output pieces + EOS), and with --ref the BLEU and chrF of the
output. `torch` is this project's decoder (`torch-int8`: with int8 linear layers,
`Translator.load(..., int8=True)`); `ct2-TYPE` exports the run to CTranslate2 with TYPE
weights (float32, int16, int8) into a temporary directory first and decodes with it, on as
many threads. A run whose config.yaml holds keys that the measured seq2seq does not know (a
newer run, measured with an older commit under `compare`) is read without them, and the
line lists them (`config_keys_left_out`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from inspect import signature
from pathlib import Path

ENGINES = ("torch", "torch-int8", "ct2-float32", "ct2-int16", "ct2-int8")


def load_translator(
    args: argparse.Namespace, engine: str, beam: int, exported: Path | None, runs: list[Path]
):
    """This project's Translator on `runs` (as the measured code reads them; several: their
    ensemble), or CTranslate2 on the export."""
    options = {"beam": beam, **args.decode}  # the fields given: older commits lack some
    if engine.startswith("torch"):
        from seq2seq.decode.translate import Translator

        int8 = {"int8": True} if engine == "torch-int8" else {}  # older commits lack it
        run = runs[0] if len(runs) == 1 else runs  # older commits take one run
        threads = threads_for(args, engine)
        return Translator.load(
            run, args.checkpoint, device=args.device, threads=threads, **int8, **options
        )
    from seq2seq.decode.ctranslate2_engine import CTranslate2Translator

    return CTranslate2Translator.load(exported, threads=threads_for(args, engine), **options)


def threads_for(args: argparse.Namespace, engine: str) -> int | None:
    """--threads, else what `seq2seq translate` takes: for this project's decoder None (the
    CPUs free, batch by batch; an older commit's command took the usable CPUs), for
    CTranslate2 the CPUs free as it loads."""
    import seq2seq.device as device

    if args.threads is not None:
        return args.threads
    if not hasattr(device, "free_cpus"):  # an older commit: its translate's default
        return device.use_threads(None)
    return None if engine.startswith("torch") else device.free_cpus()


def batch_tokens_of(translator) -> int:
    """The tokens of a batch it decodes (older commits' translators had no default by
    device: their decode section holds the number)."""
    resolve = getattr(translator, "batch_tokens", None)
    return resolve(translator.decode) if resolve else translator.decode.batch_tokens


def run_for_this_code(run: Path, directory: Path) -> tuple[Path, list[str]]:
    """The run as the measured seq2seq reads it, and the config keys left out for it.

    An older commit's schema lacks the keys that newer configs write (at their defaults,
    for a run trained without them), or refuses a null that a newer one reads as "the
    default" (decode.batch_tokens): those are left out of a copy of config.yaml, beside
    links to the run's other files in `directory`, so that the older code takes its own
    default. A run it reads as it is comes back as it is.
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
            unknown = [
                e["loc"]
                for e in error.errors()
                if e["type"] == "extra_forbidden" or ("input" in e and e["input"] is None)
            ]
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


def runs_for_this_code(runs: list[Path], directory: Path) -> tuple[list[Path], list[str]]:
    """`run_for_this_code` of each run, each in its own directory under `directory`."""
    found, dropped = [], []
    for index, run in enumerate(runs):
        (directory / str(index)).mkdir()
        run, left_out = run_for_this_code(run, directory / str(index))
        found.append(run)
        dropped += [key for key in left_out if key not in dropped]
    return found, dropped


def hypotheses_options(translator, args: argparse.Namespace) -> dict:
    """What `seq2seq translate` asks for: no attention weights (older commits had no choice),
    and the constraints where given (then the measured code has them)."""
    options = (
        {"attention": False} if "attention" in signature(translator.hypotheses).parameters else {}
    )
    if args.constraints is not None:
        from seq2seq.decode.line_io import read_constraints

        options["constraints"] = read_constraints(args.constraints)[: args.limit]
    return options


def timed_pass(translator, lines: list[str], options: dict, cuda: bool) -> tuple[list, float]:
    """A warm-up on the first 50 lines, then one timed pass over all: (hypotheses, seconds)."""
    import torch

    translator.translate(lines[:50])
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    found = translator.hypotheses(lines, **options)
    if cuda:
        torch.cuda.synchronize()
    return found, time.perf_counter() - started


def measure_decode(args: argparse.Namespace, engine: str, beam: int, exported: Path | None) -> dict:
    """Runs in its own process: load the model, warm up, time one pass over the input."""
    import torch

    from seq2seq.data.corpus import read_lines
    from seq2seq.metrics import score_corpus

    lines = read_lines(args.input)[: args.limit]
    with tempfile.TemporaryDirectory() as directory:
        runs, dropped = runs_for_this_code(args.run, Path(directory))
        translator = load_translator(args, engine, beam, exported, runs)
    cuda = getattr(translator, "device", None) is not None and translator.device.type == "cuda"
    options = hypotheses_options(translator, args)
    found, seconds = timed_pass(translator, lines, options, cuda)
    outputs = [hyps[0] if hyps else None for hyps in found]
    tokens = sum(len(h.tokens) + 1 for h in outputs if h is not None)
    result = {
        "mode": "decode",
        "engine": engine,
        "run": " ".join(str(run) for run in args.run),
        "beam": beam,
        "sentences": len(lines),
        "seconds": round(seconds, 3),
        "sentences_per_s": round(len(lines) / seconds, 2),
        "target_tokens_per_s": round(tokens / seconds, 1),
        "device": "cuda" if cuda else "cpu",
        "threads": args.threads or "default",
        # what the pass ended on (by default, what the decoder chose)
        "threads_used": torch.get_num_threads() if engine.startswith("torch") else None,
        "busy": args.busy,
        "batch_tokens": batch_tokens_of(translator),
        "length_penalty": translator.decode.length_penalty,
    }
    result |= args.decode
    if args.constraints is not None:
        result["constraints"] = str(args.constraints)
    if engine.startswith("torch"):  # CTranslate2 has its own rule (docs/decoding.md)
        result["stopping"] = translator.decode.stopping
    if dropped:
        result["config_keys_left_out"] = dropped
    if cuda:
        result["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    if args.ref:
        references = read_lines(args.ref)[: args.limit]
        scores = score_corpus([h.text if h else "" for h in outputs], references)
        result.update(bleu=round(scores.bleu, 2), chrf=round(scores.chrf, 2))
    return result


@contextmanager
def busy_cpus(count: int) -> Iterator[None]:
    """Within, `count` processes each keep a CPU busy (a Python loop), as other users' work
    would; they end with the block."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def export_for(args: argparse.Namespace, engine: str, directory: Path) -> Path | None:
    """The run exported with the engine's quantization into `directory` (None: torch)."""
    if engine.startswith("torch"):
        return None
    from seq2seq.export import export_ctranslate2

    exported = directory / engine
    export_ctranslate2(args.run[0], exported, engine.removeprefix("ct2-"), args.checkpoint)
    return exported
