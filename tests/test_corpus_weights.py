"""`data.weights`: how often an epoch holds each training corpus's pairs (repeated, or a
share drawn anew each epoch), reproducible from (seed, epoch) and resumed exactly."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from cli_helpers import run_cli, train, train_straight_and_resumed
from prepared_helpers import fake_ids, pairs_of, varied_lengths, write_prepared
from test_cli import parameters

from seq2seq.data.epoch_batches import CorpusWeights, TrainBatches, TrainingPairs

SIZES = (300, 200, 7)  # three corpora; the last too small for a share of 0.01 to round up


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> TrainingPairs:
    root = tmp_path_factory.mktemp("weights")
    parts = []
    for number, size in enumerate(SIZES):
        src_lengths, tgt_lengths = varied_lengths(size, seed=number)
        src, tgt = fake_ids(src_lengths, number), fake_ids(tgt_lengths, number + 10)
        parts.append(write_prepared(root / f"part{number}", src, tgt))
    return TrainingPairs(parts)


def counts(batches) -> Counter:
    return Counter(i for batch in batches for i in batch)


def test_weights_of_one_are_the_unweighted_epochs(corpora) -> None:
    plain = TrainBatches(corpora, 45, 300, seed=2)
    ones = TrainBatches(corpora, 45, 300, seed=2, weights=CorpusWeights([1, 1.0, 1]))
    assert ones.mixture is None and ones.epoch_pairs == len(plain)
    for epoch in range(3):
        assert list(ones.epoch(epoch)) == list(plain.epoch(epoch))


def test_whole_weights_repeat_every_pair_and_batches_keep_the_budget(corpora) -> None:
    data = TrainBatches(corpora, 45, 300, seed=2, weights=CorpusWeights([3, 1, 2]))
    first, second, third = (share.pairs for share in data.mixture.shares)  # kept pairs
    for epoch in range(2):
        batches = data.epoch(epoch)
        seen = counts(batches)
        assert sum(seen.values()) == data.epoch_pairs == 3 * first + second + 2 * third
        assert {seen[i] for i in range(first)} == {3}
        assert {seen[i] for i in range(first, first + second)} == {1}
        assert {seen[i] for i in range(first + second, len(data))} == {2}
        for batch in batches:  # padded tokens within train.batch_tokens (one wide pair alone)
            pairs = data.kept.pair(np.asarray(batch))
            width = max(corpora.lengths_at(side, pairs).max() for side in ("src", "tgt")) + 1
            assert len(batch) * width <= 300 or len(batch) == 1
    assert list(data.epoch(1)) != list(data.epoch(0))


def test_a_share_is_drawn_anew_each_epoch_and_reproducibly(corpora) -> None:
    data = TrainBatches(corpora, 45, 300, seed=5, weights=CorpusWeights([2.5, 0.25, 0.01]))
    (_, first, _, half), (start, second, _, quarter), (last, tiny, _, one) = data.mixture.shares
    assert (half, quarter, one) == (round(first / 2), round(second / 4), 1)
    epochs = [counts(data.epoch(epoch)) for epoch in range(40)]
    for seen in epochs:
        assert sorted(Counter(seen[i] for i in range(first)).items()) == [
            (2, first - half),
            (3, half),
        ]
        assert len([i for i in range(start, start + second) if seen[i]]) == quarter
        assert {seen[i] for i in range(start, start + second)} <= {0, 1}
        assert sum(seen[i] for i in range(last, last + tiny)) == 1
    shares = [frozenset(i for i in range(start, start + second) if seen[i]) for seen in epochs]
    assert len(set(shares)) == len(shares)  # a new draw each epoch
    # Over 40 epochs each pair of the quarter corpus is drawn about 10 times, none every time.
    drawn = np.array([sum(seen[i] for seen in epochs) for i in range(start, start + second)])
    assert drawn.mean() == pytest.approx(40 * quarter / second) and 0 < drawn.min()
    assert drawn.max() < 40 and drawn.std() > 1
    again = TrainBatches(corpora, 45, 300, seed=5, weights=CorpusWeights([2.5, 0.25, 0.01]))
    torch.manual_seed(9)  # the global RNG plays no part
    assert list(again.epoch(7)) == list(data.epoch(7))


def test_bad_weights_are_one_line_each(toy, tmp_path, capsys) -> None:
    second = f"{toy}/data/valid"
    cases = {
        "data.weights=[2]": "weights has 1 values for 2 training corpora",
        "data.weights=[1, 0]": "data.weights.1 = 0: Input should be greater than 0",
        "data.weights=[1, -2]": "data.weights.1 = -2",
    }
    for weights, error in cases.items():
        sets = ["--set", f"data.train=[{toy}/data/train, {second}]", "--set", weights]
        assert run_cli("config", "--config", toy / "run.yaml", *sets) == 2
        line = capsys.readouterr().err
        assert line.count("\n") == 1 and error in line


def test_a_weighted_run_resumes_exactly_and_not_under_other_weights(toy, tmp_path, capsys):
    mixed = [
        f"data.train=[{toy}/data/train, {toy}/data/valid]",
        "data.weights=[0.5, 3]",
        "train.valid_every=10",
    ]
    # An epoch: about 150 + 36 pairs, 12 batches: 30 updates span two epochs' new draws.
    straight, resumed = train_straight_and_resumed(toy, tmp_path, *mixed, steps=30, stop=17)
    a, b = parameters(straight), parameters(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    log = (straight / "train.log").read_text()
    assert "186 an epoch by data.weights" in log

    capsys.readouterr()
    changed = [*mixed[:1], "data.weights=[1, 3]", *mixed[2:], "train.max_steps=34"]
    assert train(toy, resumed, *changed) == 2
    assert "another config (data.weights: [0.5, 3.0] -> [1.0, 3.0])" in capsys.readouterr().err


def test_a_length_ratio_drops_uneven_pairs_and_says_how_many(toy, tmp_path, capsys):
    pairs = pairs_of(tmp_path / "p", fake_ids([2, 1, 6, 3, 9]), fake_ids([2, 5, 2, 4, 9]))
    data = TrainBatches(pairs, 8, 300, seed=1, max_ratio=2.0)
    assert (len(data), data.too_long, data.uneven) == (2, 1, 2)  # 1:5 and 6:2 uneven, 9:9 long
    kept = sorted(data.kept.pair(np.asarray(i)).item() for batch in data.epoch(0) for i in batch)
    assert kept == [0, 3]
    assert len(TrainBatches(pairs, 8, 300, seed=1)) == 4
    run = tmp_path / "run"
    assert train(toy, run, "data.max_len_ratio=1.5", "train.max_steps=1") == 0
    line = next(x for x in (run / "train.log").read_text().splitlines() if "pairs kept" in x)
    dropped = int(line.split(" with a length ratio over 1.5 dropped")[0].rsplit(" ", 1)[1])
    assert dropped > 0 and f"train: {300 - dropped} pairs kept" in line
    assert run_cli("config", "--config", toy / "run.yaml", "--set", "data.max_len_ratio=0.5") == 2
    assert "data.max_len_ratio = 0.5: Input should be greater than or equal to 1" in (
        capsys.readouterr().err
    )
