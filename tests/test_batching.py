from __future__ import annotations

import random

import pytest
import torch

from seq2seq.data.batching import TrainBatches, make_batch, token_batches
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


def varied_lengths(n: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """Source lengths 1..60 and target lengths loosely correlated with them, like real data."""
    rng = random.Random(seed)
    src = [rng.randint(1, 60) for _ in range(n)]
    tgt = [max(1, round(s * rng.uniform(0.7, 1.4))) for s in src]
    return src, tgt


def fake_ids(lengths: list[int]) -> list[list[int]]:
    return [[4 + (i + j) % 50 for j in range(n)] for i, n in enumerate(lengths)]


def test_make_batch_pads_and_places_bos_and_eos() -> None:
    batch = make_batch([[5, 6, 7], [8]], [[9], [10, 11, 12, 13]], indices=[4, 1])
    assert batch.src.tolist() == [[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.src_lengths.tolist() == [4, 2]
    assert batch.tgt_in.tolist() == [[BOS_ID, 9, PAD_ID, PAD_ID, PAD_ID], [BOS_ID, 10, 11, 12, 13]]
    assert batch.tgt_out.tolist() == [[9, EOS_ID, PAD_ID, PAD_ID, PAD_ID], [10, 11, 12, 13, EOS_ID]]
    assert batch.src.dtype == batch.src_lengths.dtype == batch.tgt_in.dtype == torch.long
    assert batch.indices == [4, 1]
    assert (batch.n_src_tokens, batch.n_tgt_tokens) == (6, 7)
    assert len(batch) == 2
    # True at the real source positions, EOS included; (B, 1, S) to broadcast over queries.
    assert batch.src_mask.tolist() == [[[True] * 4], [[True, True, False, False]]]


def test_make_batch_without_target() -> None:
    batch = make_batch([[5], [6, 7]], None, indices=[0, 1])
    assert batch.tgt_in is None and batch.tgt_out is None
    assert batch.src.shape == (2, 3)
    assert batch.n_tgt_tokens == 0
    moved = batch.to("meta")
    assert moved.src.device.type == "meta" and moved.src_lengths.device.type == "meta"
    assert moved.tgt_in is None and moved.indices == [0, 1]


def test_to_moves_every_tensor() -> None:
    moved = make_batch([[5]], [[6]], indices=[0]).to("meta")
    tensors = (moved.src, moved.src_lengths, moved.tgt_in, moved.tgt_out)
    assert all(t.device.type == "meta" for t in tensors)


def test_token_budget_is_respected() -> None:
    src, tgt = varied_lengths(2000)
    budget = 500
    batches = token_batches(src, tgt, budget, torch.Generator().manual_seed(0))
    for batch in batches:
        cost = len(batch) * max(max(src[i], tgt[i]) + 1 for i in batch)
        assert cost <= budget or len(batch) == 1
    # The budget is used well: most batches are more than half full.
    costs = [len(b) * max(max(src[i], tgt[i]) + 1 for i in b) for b in batches]
    assert sum(c > budget / 2 for c in costs) > 0.9 * len(batches)


def test_budget_below_one_sentence_gives_single_sentence_batches() -> None:
    batches = token_batches([10, 3, 7], [4, 12, 2], batch_tokens=5)
    assert sorted(map(len, batches)) == [1, 1, 1]
    assert sorted(i for b in batches for i in b) == [0, 1, 2]


def test_without_generator_batches_are_deterministic_and_sorted() -> None:
    src = [5, 1, 9, 1, 3, 5]
    batches = token_batches(src, None, batch_tokens=12)
    assert batches == token_batches(src, None, batch_tokens=12)
    # By length, ties in corpus order; widths (length + EOS) 2, 2, 4 | 6, 6 | 10.
    assert batches == [[1, 3, 4], [0, 5], [2]]


def test_every_index_exactly_once_per_epoch() -> None:
    src, tgt = varied_lengths(1000)
    batches = TrainBatches(fake_ids(src), fake_ids(tgt), batch_tokens=300, seed=1)
    for epoch in range(3):
        flat = [i for b in batches.epoch(epoch) for i in b]
        assert sorted(flat) == list(range(1000))


def test_epochs_differ_but_each_is_reproducible() -> None:
    src, tgt = varied_lengths(500)
    a = TrainBatches(fake_ids(src), fake_ids(tgt), batch_tokens=300, seed=7)
    b = TrainBatches(fake_ids(src), fake_ids(tgt), batch_tokens=300, seed=7)
    torch.manual_seed(123)  # the global RNG must play no part
    first = a.epoch(0)
    torch.manual_seed(456)
    assert b.epoch(0) == first
    assert a.epoch(1) != first
    assert TrainBatches(fake_ids(src), fake_ids(tgt), 300, seed=8).epoch(0) != first
    # Not just the batch order: ties are broken differently, so batches hold other examples.
    assert {tuple(sorted(x)) for x in a.epoch(1)} != {tuple(sorted(x)) for x in first}


def test_bucketed_batches_have_little_padding() -> None:
    src, tgt = varied_lengths(3000, seed=1)
    batches = token_batches(src, tgt, 1000, torch.Generator().manual_seed(0))
    real = padded = 0
    for batch in batches:
        for lengths in (src, tgt):
            width = max(lengths[i] for i in batch) + 1
            padded += width * len(batch)
            real += sum(lengths[i] + 1 for i in batch)
    assert (padded - real) / padded < 0.15


def test_train_batches_builds_the_rows_it_was_asked_for() -> None:
    src = [[5, 6], [7], [8, 9, 10]]
    tgt = [[11], [12, 13], [14]]
    data = TrainBatches(src, tgt, batch_tokens=100, seed=1)
    assert len(data) == 3
    batch = data.batch([2, 0])
    assert batch.indices == [2, 0]
    assert batch.src.tolist() == [[8, 9, 10, EOS_ID], [5, 6, EOS_ID, PAD_ID]]
    assert batch.tgt_out.tolist() == [[14, EOS_ID], [11, EOS_ID]]


def test_mismatched_lengths_are_rejected() -> None:
    with pytest.raises(ValueError):
        token_batches([1, 2], [1], batch_tokens=10)
    with pytest.raises(ValueError):
        TrainBatches([[5]], [[6], [7]], batch_tokens=10, seed=1)
