"""The update and its feed: padded shapes change nothing, the feed prepares each rank's
share of the epoch, and updates that leave their outcome on the device (as on one GPU) skip, count
and stop as updates read back at once do. CUDA graphs themselves: tests/test_cuda.py."""

import re

import pytest
import torch
from cli_helpers import train
from prepared_helpers import pairs_of
from test_models import tiny
from test_resilience import blow_up_on_update, checkpoint, nan_on_calls

from seq2seq.data.epoch_batches import TrainBatches
from seq2seq.data.padded_batches import make_batch, padding_mask
from seq2seq.train import trainer
from seq2seq.train.distributed import World
from seq2seq.train.feed import BatchFeed, pad_to_shape
from seq2seq.train.loss import token_cross_entropy


def loss_and_gradients(model, batch) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    mask = padding_mask(batch.src_lengths, batch.src.size(1))
    loss = token_cross_entropy(model(batch.src, mask, batch.tgt_in), batch.tgt_out, 0.1)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_padding_to_a_shape_changes_neither_loss_nor_gradients(arch):
    model = tiny(arch, attention="scaled-dot")
    generator = torch.Generator().manual_seed(5)
    lengths = [int(n) for n in torch.randint(1, 12, (21,), generator=generator)]
    src = [torch.randint(4, 30, (n,), generator=generator).tolist() for n in lengths]
    tgt = [torch.randint(4, 40, (n + 2,), generator=generator).tolist() for n in lengths]
    batch = make_batch(src, tgt, list(range(21)))
    padded = pad_to_shape(batch)
    assert padded.src.shape == (32, 16) and padded.tgt_in.shape == (32, 16)
    assert padded.src_lengths[21:].tolist() == [1] * 11
    loss, grads = loss_and_gradients(model, batch)
    padded_loss, padded_grads = loss_and_gradients(model, padded)
    torch.testing.assert_close(padded_loss, loss, rtol=1e-5, atol=1e-5)
    assert len(grads) == len(padded_grads)
    for g, h in zip(grads, padded_grads, strict=True):
        # Padded rows change how sums are blocked: elements move by the float rounding of
        # their tensor's scale (on an AMD EPYC, 1.1e-6 on an element of 1.7e-4).
        torch.testing.assert_close(h, g, rtol=1e-4, atol=1e-4 * float(g.abs().max()))


def toy_batches(directory, n: int = 41) -> TrainBatches:
    src = [[5 + i % 7] * (1 + i % 5) for i in range(n)]
    pairs = pairs_of(directory, src, [ids + [9] for ids in src])
    return TrainBatches(pairs, max_len=100, batch_tokens=24, seed=3)


def test_a_feed_prepares_the_epoch_from_where_it_resumes_each_rank_its_share_by_update(tmp_path):
    data = toy_batches(tmp_path / "corpus")
    order = data.epoch(0)
    for rank in (0, 1):
        feed = BatchFeed(data, World(rank=rank, size=2), torch.device("cpu"), shapes=True)
        groups = list(feed.updates(order, 2, 3))  # three batches an update
        assert [len(group) for group in groups[:-1]] == [3] * (len(groups) - 1)
        prepared = [p for group in groups for p in group]
        assert [p.indices for p in prepared] == order[2:] and 1 <= len(groups[-1]) <= 3
        for p in prepared:
            shard = p.indices[rank::2] or p.indices[:1]
            assert p.weight == (1.0 if p.indices[rank::2] else 0.0)
            assert p.tokens == data.target_tokens(p.indices)  # the global batch's
            assert torch.equal(
                p.batch.src[: len(shard)], pad_to_shape(data.batch(shard)).src[: len(shard)]
            )
            assert p.batch.src.size(0) % 16 == 0 and p.batch.src.size(1) % 8 == 0


@pytest.fixture
def deferred(monkeypatch):
    """Updates as on one GPU, here on the CPU (tests/test_cuda.py has the GPU's): skipped on
    the device (the fused Adam), read back when a log line or a validation needs them."""
    monkeypatch.setattr(trainer, "defers_reading", lambda *args: True)


def test_a_deferred_update_skips_on_the_device_and_the_log_says_which(
    toy, tmp_path, monkeypatch, deferred
):
    nan_on_calls(monkeypatch, {3, 5})
    assert (
        train(toy, tmp_path / "r", "train.device=cpu", "train.max_steps=8", "train.log_every=4")
        == 0
    )
    log = (tmp_path / "r/train.log").read_text()
    assert "step 3: loss nan, gradient norm nan: update skipped (1 so far, 1 in a row)" in log
    assert "step 5: loss nan, gradient norm nan: update skipped (2 so far, 1 in a row)" in log
    progress = checkpoint(tmp_path / "r")["progress"]
    assert progress["skipped_updates"] == 2 and progress["step"] == 8
    assert all(torch.isfinite(t).all() for t in checkpoint(tmp_path / "r")["model"].values())
    # The fused step counted only the 6 updates it applied.
    optimizer = checkpoint(tmp_path / "r")["optimizer"]
    assert {float(s["step"]) for s in optimizer["state"].values()} == {6.0}


def test_deferred_updates_stop_after_too_many_skips_in_a_row_at_the_next_look(
    toy, tmp_path, monkeypatch, deferred, capsys
):
    nan_on_calls(monkeypatch, set(range(5, 100)))
    overrides = ("train.max_steps=50", "train.max_skipped_updates=3", "train.log_every=5")
    assert train(toy, tmp_path / "r", "train.device=cpu", *overrides, "train.valid_every=50") == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    # Updates 5-7 were the three in a row; the trainer looked at update 10.
    assert re.match(
        r"seq2seq: error: 3 updates in a row had a non-finite loss or gradient \(in steps 6-10\)",
        line,
    )


def test_deferred_and_immediate_updates_train_alike(toy, tmp_path, monkeypatch):
    assert (
        train(toy, tmp_path / "now", "train.device=cpu", "train.max_steps=6", "train.log_every=3")
        == 0
    )
    with monkeypatch.context() as patch:
        patch.setattr(trainer, "defers_reading", lambda *args: True)
        assert (
            train(
                toy,
                tmp_path / "later",
                "train.device=cpu",
                "train.max_steps=6",
                "train.log_every=3",
            )
            == 0
        )
    now, later = (checkpoint(tmp_path / name) for name in ("now", "later"))
    assert now["progress"]["target_tokens"] == later["progress"]["target_tokens"]
    for key, value in now["model"].items():  # the fused Adam rounds differently
        torch.testing.assert_close(later["model"][key], value, rtol=1e-4, atol=1e-5)


def test_a_deferred_update_that_makes_parameters_non_finite_is_named_by_its_window(
    toy, tmp_path, monkeypatch, deferred, capsys
):
    blow_up_on_update(monkeypatch, 3)
    overrides = ("train.max_steps=20", "train.valid_every=50", "train.log_every=4")
    assert train(toy, tmp_path / "r", "train.device=cpu", *overrides) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "the update in steps 2-4 made the model's parameters non-finite" in line
