"""Training batches over prepared corpora: the same batches, and the same tensors, as the
lists they replaced; filtered by length; several corpora read as one; built from threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from prepared_helpers import fake_ids, pairs_of, varied_lengths, write_prepared
from test_padded_batches import list_batches

from seq2seq.data.epoch_batches import KeptPairs, TrainBatches, TrainingPairs
from seq2seq.data.padded_batches import make_batch


def old_epoch(src, tgt, max_len, batch_tokens, seed, epoch) -> list[list[int]]:
    """What TrainBatches gave when it held lists: the kept pairs' numbers, batched."""
    kept = [i for i in range(len(src)) if len(src[i]) <= max_len and len(tgt[i]) <= max_len]
    generator = torch.Generator().manual_seed((seed * 1_000_003 + epoch) % 2**63)
    return list_batches(
        [len(src[i]) for i in kept], [len(tgt[i]) for i in kept], batch_tokens, generator
    )


@pytest.mark.parametrize("seed", range(6))
def test_epochs_and_tensors_equal_those_of_the_lists_they_replace(tmp_path, seed) -> None:
    src_lengths, tgt_lengths = varied_lengths(1500, seed)
    src, tgt = fake_ids(src_lengths, seed), fake_ids(tgt_lengths, seed + 100)
    max_len = [30, 45, 60, 1000, 8, 52][seed]  # drops many, some, none
    data = TrainBatches(pairs_of(tmp_path / "c", src, tgt), max_len, 400, seed)
    kept = [i for i in range(len(src)) if len(src[i]) <= max_len and len(tgt[i]) <= max_len]
    assert len(data) == len(kept) and data.too_long == len(src) - len(kept)
    kept_src = sum(len(src[i]) for i in kept)
    assert data.length_ratio == kept_src / sum(len(tgt[i]) for i in kept)
    for epoch in (0, 1, 5):
        batches = data.epoch(epoch)
        assert list(batches) == old_epoch(src, tgt, max_len, 400, seed, epoch)
    for indices in list(batches)[:20]:
        built = data.batch(indices)
        expected = make_batch(
            [src[kept[i]] for i in indices], [tgt[kept[i]] for i in indices], indices
        )
        for field in ("src", "src_lengths", "tgt_in", "tgt_out"):
            assert torch.equal(getattr(built, field), getattr(expected, field)), field
        assert built.indices == expected.indices == indices
        assert (built.n_src_tokens, built.n_tgt_tokens) == (
            expected.n_src_tokens,
            expected.n_tgt_tokens,
        )
        assert data.target_tokens(indices) == expected.n_tgt_tokens


def test_every_pair_exactly_once_per_epoch_and_epochs_reproducible(tmp_path) -> None:
    src_lengths, tgt_lengths = varied_lengths(1000)
    pairs = pairs_of(tmp_path / "c", fake_ids(src_lengths), fake_ids(tgt_lengths))
    a, b = TrainBatches(pairs, 100, 300, seed=7), TrainBatches(pairs, 100, 300, seed=7)
    for epoch in range(3):
        assert sorted(i for batch in a.epoch(epoch) for i in batch) == list(range(1000))
    torch.manual_seed(123)  # the global RNG must play no part
    first = list(a.epoch(0))
    torch.manual_seed(456)
    assert list(b.epoch(0)) == first
    assert list(a.epoch(1)) != first
    assert list(TrainBatches(pairs, 100, 300, seed=8).epoch(0)) != first
    # Not just the batch order: ties are broken differently, so batches hold other pairs.
    assert {tuple(sorted(x)) for x in a.epoch(1)} != {tuple(sorted(x)) for x in first}
    epoch = a.epoch(2)
    assert epoch[1:3] == [epoch[1], epoch[2]] and epoch[-1] == list(epoch)[-1]


def test_several_corpora_read_as_their_concatenation(tmp_path) -> None:
    src_lengths, tgt_lengths = varied_lengths(900, seed=4)
    src, tgt = fake_ids(src_lengths, 1), fake_ids(tgt_lengths, 2)
    whole = TrainBatches(pairs_of(tmp_path / "whole", src, tgt), 50, 500, seed=3)
    parts = TrainingPairs(
        [
            write_prepared(tmp_path / f"part{i}", src[a:b], tgt[a:b])
            for i, (a, b) in enumerate([(0, 100), (100, 101), (101, 900)])
        ]
    )
    split = TrainBatches(parts, 50, 500, seed=3)
    assert len(split) == len(whole)
    assert list(split.epoch(2)) == list(whole.epoch(2))
    for indices in list(whole.epoch(2))[:30]:
        for field in ("src", "tgt_in", "tgt_out", "src_lengths"):
            expected = getattr(whole.batch(indices), field)
            assert torch.equal(getattr(split.batch(indices), field), expected)


def test_batches_built_from_threads_equal_those_built_in_turn(tmp_path) -> None:
    src_lengths, tgt_lengths = varied_lengths(2000, seed=2)
    data = TrainBatches(
        pairs_of(tmp_path / "c", fake_ids(src_lengths), fake_ids(tgt_lengths)), 100, 600, 1
    )
    batches = list(data.epoch(0))
    expected = [data.batch(indices).tgt_out for indices in batches]
    found: dict[int, torch.Tensor] = {}

    def build(share: int) -> None:
        for number in range(share, len(batches), 4):
            found[number] = data.batch(batches[number]).tgt_out

    threads = [threading.Thread(target=build, args=(share,)) for share in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(torch.equal(found[n], expected[n]) for n in range(len(batches)))


def test_a_pair_costs_a_few_bytes_and_no_python_object(tmp_path) -> None:
    """What a process holds per pair: the epoch's 4-byte order (a 2-byte key while sorting)."""
    src_lengths, tgt_lengths = varied_lengths(3000, seed=5)
    data = TrainBatches(
        pairs_of(tmp_path / "c", fake_ids(src_lengths), fake_ids(tgt_lengths)), 80, 600, 1
    )
    assert data.sort_keys().dtype == np.uint16
    assert not [name for name, value in vars(data).items() if np.size(value) >= 3000]
    assert data.epoch(0).order.dtype == np.int32
    assert len(data.kept.kept_before) == data.too_long  # only the dropped pairs


def test_kept_pairs_map_to_their_place_among_all() -> None:
    dropped = np.array([0, 3, 4, 9])  # of 12 pairs: kept 1, 2, 5, 6, 7, 8, 10, 11
    kept = KeptPairs(dropped)
    assert kept.pair(np.arange(8)).tolist() == [1, 2, 5, 6, 7, 8, 10, 11]
    assert KeptPairs(np.zeros(0, np.int64)).pair(np.array([4, 0])).tolist() == [4, 0]


def test_an_empty_batch_is_refused(tmp_path) -> None:
    data = TrainBatches(pairs_of(tmp_path / "c", [[5]], [[6]]), 10, 10, 1)
    with pytest.raises(ValueError):
        data.batch([])
    with pytest.raises(ValueError):
        TrainBatches(pairs_of(tmp_path / "d", [[5]], [[6]]), 10, 0, 1)
