"""Benchmarks that print one JSON line per measurement, so results can be compared.

    python scripts/bench.py decode --run runs/multi30k-transformer \\
        --input data/multi30k/test_2016_flickr.de.gz [--ref data/multi30k/test_2016_flickr.en.gz] \\
        [--beam 1 5] [--threads 2] [--limit N]

`decode` translates the input with each beam size after a warm-up (the first 50 lines),
each in a fresh process so that its peak memory is its own, and reports sentences/s,
target tokens/s (output pieces + EOS), the peak resident memory, and with --ref the
BLEU and chrF of the output.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure_decode(args: argparse.Namespace, beam: int) -> dict:
    """Runs in its own process: load the run, warm up, time one pass over the input."""
    import torch

    from seq2seq.data.corpus import read_lines
    from seq2seq.decode.translate import Translator
    from seq2seq.evaluate import score_corpus

    torch.set_num_threads(args.threads)
    lines = read_lines(args.input)[: args.limit]
    translator = Translator.from_run(
        args.run, args.checkpoint, {"beam": beam, "batch_tokens": args.batch_tokens}
    )
    translator.translate(lines[:50])
    if translator.device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    found = translator.translate_nbest(lines)
    if translator.device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    outputs = [hyps[0] if hyps else None for hyps in found]
    tokens = sum(len(h.tokens) + 1 for h in outputs if h is not None)
    result = {
        "mode": "decode",
        "run": str(args.run),
        "beam": beam,
        "sentences": len(lines),
        "seconds": round(seconds, 3),
        "sentences_per_s": round(len(lines) / seconds, 2),
        "target_tokens_per_s": round(tokens / seconds, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "device": translator.device.type,
        "threads": args.threads,
        "batch_tokens": translator.decode.batch_tokens,
        "length_penalty": translator.decode.length_penalty,
    }
    if translator.device.type == "cuda":
        result["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    if args.ref:
        references = read_lines(args.ref)[: args.limit]
        scores = score_corpus([h.text if h else "" for h in outputs], references)
        result.update(bleu=round(scores.bleu, 2), chrf=round(scores.chrf, 2))
    return result


def main() -> None:
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
    args = parser.parse_args()

    context = multiprocessing.get_context("spawn")
    for beam in args.beam:
        with context.Pool(1) as pool:
            print(json.dumps(pool.apply(measure_decode, (args, beam))), flush=True)


if __name__ == "__main__":
    main()
