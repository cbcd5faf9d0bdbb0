"""train.precision: bf16 and fp16 autocast the training forward pass; weights stay float32;
fp16 (CUDA only) scales the loss so that small gradients survive."""

import os
import re

import pytest
import torch
from cli_helpers import train

from seq2seq.device import out_of_memory
from seq2seq.train import update
from seq2seq.train.run import ONEDNN_KERNEL_CACHE


def loss_dtypes(monkeypatch) -> set[torch.dtype]:
    """The dtypes of the logits training computes its loss on, as they come."""
    seen: set[torch.dtype] = set()
    original = update.token_cross_entropy

    def loss(logits, *args):
        seen.add(logits.dtype)
        return original(logits, *args)

    monkeypatch.setattr(update, "token_cross_entropy", loss)
    return seen


@pytest.mark.skipif(
    not torch.ops.mkldnn._is_mkldnn_bf16_supported(),
    reason="this CPU has no native bf16 (AVX-512 BF16 or AMX): training refuses bf16 here",
)
@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_bf16_trains_in_bf16_with_float32_weights(toy, tmp_path, monkeypatch, arch):
    seen = loss_dtypes(monkeypatch)
    # setenv first, so that teardown also removes the value training sets
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "")
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY")
    run = tmp_path / "r"
    budget = ["train.max_steps=40", "train.valid_every=100", "model.ff_dim=32"]
    assert train(toy, run, "train.precision=bf16", f"model.arch={arch}", *budget) == 0
    assert seen == {torch.bfloat16}
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(ONEDNN_KERNEL_CACHE)

    state = torch.load(run / "checkpoints/last.pt", weights_only=True)
    assert all(t.dtype == torch.float32 for t in state["model"].values() if t.is_floating_point())
    losses = [float(x) for x in re.findall(r"loss ([\d.]+)  lr", (run / "train.log").read_text())]
    assert len(losses) == 40 and sum(losses[-5:]) < sum(losses[:5])


def test_a_users_kernel_cache_setting_wins(toy, tmp_path, monkeypatch):
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "1024")
    assert train(toy, tmp_path / "r", "train.max_steps=1", "train.valid_every=100") == 0
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "1024"


def test_fp16_needs_a_cuda_gpu(toy, tmp_path, capsys):
    settings = ("train.precision=fp16", "train.device=cpu", "train.max_steps=1")
    assert train(toy, tmp_path / "r", *settings) == 2
    assert "train.precision is fp16, which needs a CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("precision, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_fp16_and_bf16_on_cuda_learn_in_their_dtype_with_float32_weights(
    toy, tmp_path, monkeypatch, arch, precision, dtype
):
    seen = loss_dtypes(monkeypatch)
    run = tmp_path / "r"
    settings = [f"train.precision={precision}", "train.device=cuda", f"model.arch={arch}",
                "train.max_steps=40", "train.valid_every=20", "model.ff_dim=32"]  # fmt: skip
    assert train(toy, run, *settings) == 0
    assert seen == {dtype}
    state = torch.load(run / "checkpoints/last.pt", weights_only=True)
    assert all(t.dtype == torch.float32 for t in state["model"].values() if t.is_floating_point())
    if precision == "fp16":
        assert state["scaler"]["scale"] > 0  # the gradient scaler's state, to resume with
    losses = [float(x) for x in re.findall(r"loss ([\d.]+)  lr", (run / "train.log").read_text())]
    assert len(losses) == 40 and sum(losses[-5:]) < sum(losses[:5])


def test_out_of_memory_is_recognised_from_the_cpu_allocator_and_cuda():
    assert out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: 8GB"))
    assert out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert out_of_memory(MemoryError())
    assert not out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
