from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from prepared_helpers import varied_lengths

from seq2seq.data import padded_batches
from seq2seq.data.padded_batches import make_batch, token_batches
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


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


def test_mismatched_lengths_are_rejected() -> None:
    with pytest.raises(ValueError):
        token_batches([1, 2], [1], batch_tokens=10)


def list_batches(src_lengths, tgt_lengths, batch_tokens, generator=None) -> list[list[int]]:
    """The batching that token_batches replaced, on Python lists, kept as the reference that
    it must equal: a random permutation, a stable sort by (padded size, source length,
    target length), greedy batches, a shuffled batch order."""
    n = len(src_lengths)
    if tgt_lengths is None:
        sizes = [s + 1 for s in src_lengths]
        keys = sizes
    else:
        sizes = [max(s, t) + 1 for s, t in zip(src_lengths, tgt_lengths, strict=True)]
        keys = list(zip(sizes, src_lengths, tgt_lengths, strict=True))
    order = list(range(n)) if generator is None else torch.randperm(n, generator=generator).tolist()
    order.sort(key=keys.__getitem__)
    batches, current, width = [], [], 0
    for index in order:
        new_width = max(width, sizes[index])
        if current and (len(current) + 1) * new_width > batch_tokens:
            batches.append(current)
            current, new_width = [], sizes[index]
        current.append(index)
        width = new_width
    if current:
        batches.append(current)
    if generator is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return batches


@pytest.mark.parametrize("seed", range(40))
def test_batches_equal_the_list_algorithm_they_replace(seed) -> None:
    rng = random.Random(seed)
    n = rng.choice([1, 2, 7, 300, 2000])
    longest = rng.choice([0, 3, 80, 400, 5000])  # 5,000: past the grid of ranked keys
    src = [rng.randint(0, longest) for _ in range(n)]
    tgt = None if seed % 4 == 0 else [rng.randint(0, longest) for _ in range(n)]
    budget = rng.choice([1, 7, 64, 500, 4096, 10**6])
    assert token_batches(src, tgt, budget) == list_batches(src, tgt, budget)
    new, old = (torch.Generator().manual_seed(seed) for _ in range(2))
    assert token_batches(src, tgt, budget, new) == list_batches(src, tgt, budget, old)


def test_the_chunked_counting_sort_equals_one_pass(monkeypatch) -> None:
    src, tgt = varied_lengths(1000, seed=3)
    monkeypatch.setattr(padded_batches, "SORT_CHUNK", 7)  # many chunks, keys split across them
    new, old = (torch.Generator().manual_seed(5) for _ in range(2))
    assert token_batches(src, tgt, 300, new) == list_batches(src, tgt, 300, old)


@pytest.mark.parametrize("longest", [3, 80, 5000])  # 5,000: past the grid of ranked keys
def test_width_counts_from_keys_count_the_padded_widths(longest) -> None:
    rng = random.Random(longest)
    src, tgt = (np.array([rng.randint(0, longest) for _ in range(3000)]) for _ in range(2))
    shape = padded_batches.ShapeKeys(int(src.max()), int(tgt.max()))
    assert (shape.table is None) == (longest == 5000)
    picked = rng.choices(range(3000), k=4000)  # some twice, some not at all
    counts = shape.width_counts(shape(src[picked], tgt[picked]))
    expected = np.bincount(padded_batches.padded_widths(src[picked], tgt[picked]))
    assert np.array_equal(counts[: len(expected)], expected) and not counts[len(expected) :].any()
