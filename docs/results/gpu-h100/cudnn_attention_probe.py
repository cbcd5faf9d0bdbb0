"""Why were the first epoch's updates slow on a GPU? Times updates of the Multi30k
Transformer recipe (bf16) on batch shapes not seen before and seen before, with PyTorch's
SDPA kernels as they come and with cuDNN's attention turned off, then profiles five updates.
Run at 8016e9e, before `attention.base.fused_attention` kept cuDNN's kernels out (after it,
the global switches below no longer reach attention), from the repository root:
    python3 docs/results/gpu-h100/cudnn_attention_probe.py > cudnn-attention.log
"""

import argparse
import sys
import tempfile
import time

sys.path.insert(0, "scripts")
import torch
from bench_train import new_trainer, training_batches

args = argparse.Namespace(
    config="configs/multi30k_transformer.yaml", set=sys.argv[1:], threads=4, tokenizer=None
)
with tempfile.TemporaryDirectory() as tmp:
    cfg, trainer = new_trainer(args, tmp)
    batches = training_batches(trainer, 3, 230)

    def timed(bs, label):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for b in bs:
            trainer.train_step(b)
        torch.cuda.synchronize()
        print(f"{label}: {1000 * (time.perf_counter() - t) / len(bs):.1f} ms/update", flush=True)

    timed(batches[:5], "first 5 (warm-up)")
    timed(batches[5:35], "30 unseen shapes, default backends")
    timed(batches[5:35], "the same 30 again")
    torch.backends.cuda.enable_cudnn_sdp(False)
    timed(batches[35:65], "30 unseen shapes, cuDNN SDPA off")
    torch.backends.cuda.enable_cudnn_sdp(True)
    torch.backends.cudnn.enabled = False
    timed(batches[65:95], "30 unseen shapes, cuDNN off entirely")
    torch.backends.cudnn.enabled = True
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for b in batches[95:100]:
            trainer.train_step(b)
        torch.cuda.synchronize()
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=18), flush=True)
    print(
        "backend flags:",
        torch.backends.cuda.cudnn_sdp_enabled(),
        torch.backends.cuda.flash_sdp_enabled(),
        torch.backends.cuda.mem_efficient_sdp_enabled(),
    )
