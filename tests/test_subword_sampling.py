"""Subword regularization (`data.subword_sampling`): segmentations drawn from the tokenizer
(unigram sampling, BPE-dropout), each prepared once like the corpus itself and kept, one
an epoch, and resumed exactly."""

from __future__ import annotations

import re
import shutil
from collections import Counter

import numpy as np
import pytest
import torch
from cli_helpers import run_cli, train
from prepared_helpers import fake_ids, pairs_of
from test_cli import parameters
from test_corpus_encoder import Log

from seq2seq.config import DataConfig, SubwordSamplingConfig, TokenizerConfig
from seq2seq.data import corpus, corpus_encoder
from seq2seq.data.epoch_batches import TrainBatches
from seq2seq.data.source import CorpusInput
from seq2seq.data.sources import corpus_source
from seq2seq.data.tokenizer import EOS_ID, PAD_ID, SegmentationSample, train_tokenizer
from seq2seq.data.training_data import prepare_training_data
from seq2seq.errors import UserError

ALPHA = {"bpe": 0.2, "unigram": 0.1}


@pytest.fixture
def text(toy, tmp_path) -> DataConfig:
    for side in ("src", "tgt"):
        shutil.copy(toy / f"data/train.{side}", tmp_path / f"train.{side}")
    train = str(tmp_path / "train")
    # alpha 0.1: each draw re-segments about 120 of the 300 targets (0.3: 0 to 9 of them, so
    # that a draw was the best segmentation itself about once in ten).
    sampling = SubwordSamplingConfig(alpha=0.1, segmentations=3)
    return DataConfig(src="src", tgt="tgt", train=train, valid=train, subword_sampling=sampling)


def rows(corpus, side: str) -> list[list[int]]:
    return [row.tolist() for row in corpus.sides[side].rows(np.arange(corpus.pairs))]


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_a_sample_spells_the_same_text_and_its_calls_draw_apart(toy, tmp_path, model_type):
    lines = corpus.read_lines(toy / "data/train.tgt")
    cfg = TokenizerConfig(vocab_size=120, model_type=model_type)
    tokenizer = train_tokenizer(cfg, lines, lines, tmp_path / "tok")
    best = tokenizer.encode_tgt(lines)
    sample = SegmentationSample(ALPHA[model_type], -1, number=0)
    drawn = tokenizer.sample("tgt", lines, sample, chunk=0)
    other = tokenizer.sample("tgt", lines, SegmentationSample(ALPHA[model_type], -1, 1), 0)
    assert tokenizer.decode_tgt(drawn) == tokenizer.decode_tgt(best) == lines
    changed = sum(a != b for a, b in zip(drawn, best, strict=True))
    assert changed > len(lines) / 4 and drawn != other
    assert tokenizer.sample("tgt", lines, sample, chunk=1) != drawn
    assert sum(map(len, drawn)) > sum(map(len, best))  # finer pieces than the best ones


def test_every_segmentation_is_prepared_once_in_a_process_of_its_own(text, tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_encoder, "cores", lambda: 2)  # what the machine has aside
    tokenizer_cfg = TokenizerConfig(vocab_size=120, model_type="unigram")
    log = Log()
    made = prepare_training_data(text, tokenizer_cfg, tmp_path / "a", seed=4, log=log)
    assert log.said("sampling 3 segmentations in 2 processes")
    assert len(made.samples) == 3 and all(len(corpora) == 1 for corpora in made.samples)
    best = rows(made.corpora[0], "tgt")
    drawn = [rows(corpora[0], "tgt") for corpora in made.samples]
    assert len({str(sample) for sample in drawn}) == 3 and best not in drawn
    for sample, corpora in zip(drawn, made.samples, strict=True):
        assert made.tokenizer.decode_tgt(sample) == made.tokenizer.decode_tgt(best)
        assert corpora[0].manifest["sample"]["alpha"] == 0.1
    log = Log()
    again = prepare_training_data(text, tokenizer_cfg, tmp_path / "a", seed=4, log=log)
    assert not log.lines and again.key == made.key  # nothing drawn again
    assert [rows(corpora[0], "tgt") for corpora in again.samples] == drawn
    plain = text.model_copy(update={"subword_sampling": SubwordSamplingConfig()})
    fewer = text.model_copy(update={"subword_sampling": SubwordSamplingConfig(alpha=0.3)})
    monkeypatch.setattr(corpus_encoder, "cores", lambda: 1)  # drawn here: no process to start
    assert prepare_training_data(plain, tokenizer_cfg, tmp_path / "a", seed=4).key != made.key
    assert prepare_training_data(fewer, tokenizer_cfg, tmp_path / "a", seed=4).samples


def test_a_sampling_process_s_error_is_its_one_line(text, tmp_path):
    corpus = CorpusInput(corpus_source(text.train), ("src", "tgt"))
    jobs = [(corpus, SegmentationSample(0.3, -1, 0))]
    with pytest.raises(UserError, match=r"^no tokenizer in .*/none: expected joint.model"):
        corpus_encoder._draw_in_processes(tmp_path / "none", jobs, workers=1)


def test_each_chunk_draws_from_a_seed_of_its_own(toy, tmp_path, monkeypatch):
    line = corpus.read_lines(toy / "data/train.src")[0]
    for side in ("src", "tgt"):
        (tmp_path / f"same.{side}").write_text(f"{line}\n" * 60)
    monkeypatch.setattr(corpus_encoder, "CHUNK_PAIRS", 10)
    sampling = SubwordSamplingConfig(alpha=0.3, segmentations=1)
    data = DataConfig(
        src="src", tgt="tgt", train=str(tmp_path / "same"), valid="v", subword_sampling=sampling
    )
    made = prepare_training_data(data, TokenizerConfig(vocab_size=60), tmp_path / "tok", 1)
    drawn = rows(made.samples[0][0], "src")
    chunks = {str(drawn[start : start + 10]) for start in range(0, 60, 10)}
    assert len(chunks) == 6


def test_epoch_e_reads_sample_e_mod_their_number(tmp_path):
    lengths = [3, 5, 2, 7, 4, 6, 1, 8] * 5
    best = pairs_of(tmp_path / "best", fake_ids(lengths, 0), fake_ids(lengths, 1))
    samples = [
        pairs_of(tmp_path / f"s{n}", fake_ids(lengths, 10 + n), fake_ids(lengths, 20 + n))
        for n in range(3)
    ]
    data = TrainBatches(best, 100, 60, seed=2, samples=samples)
    for epoch in range(7):
        read = Counter()
        for indices in data.epoch(epoch):
            batch = data.batch(indices)
            for row in batch.src.tolist():
                read[tuple(i for i in row if i not in (PAD_ID, EOS_ID))] += 1
        sample = samples[epoch % 3].corpora[0]
        assert read == Counter(tuple(row) for row in rows(sample, "src"))
    again = TrainBatches(best, 100, 60, seed=2, samples=samples)
    assert list(again.epoch(5)) == list(data.epoch(5))


def test_a_sample_with_no_pair_short_enough_is_one_line(tmp_path):
    best = pairs_of(tmp_path / "best", fake_ids([2, 3]), fake_ids([2, 2]))
    longer = pairs_of(tmp_path / "long", fake_ids([9, 9]), fake_ids([9, 9]))
    data = TrainBatches(best, 5, 60, seed=1, samples=[best, longer])
    assert len(data.epoch(0)) == 1
    with pytest.raises(UserError, match="sampled segmentation 1 has no training pair of at most 5"):
        data.epoch(1)


def test_a_sampled_run_trains_resumes_exactly_and_not_under_other_settings(toy, tmp_path, capsys):
    sampled = [
        "tokenizer.model_type=unigram",
        "data.subword_sampling.alpha=0.3",
        "data.subword_sampling.segmentations=2",
        "train.valid_every=10",
    ]
    # An epoch of the toy corpus is about 10 updates: 30 span both samples. The resumed
    # run reads the samples the straight one drew (a copy of its tokenizer directory):
    # drawn again, they would differ.
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert train(toy, straight, *sampled, "train.max_steps=30") == 0
    shutil.copytree(straight / "tokenizer", resumed / "tokenizer")
    assert train(toy, resumed, *sampled, "train.max_steps=17") == 0
    assert train(toy, resumed, *sampled, "train.max_steps=30") == 0
    a, b = parameters(straight), parameters(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    log = (straight / "train.log").read_text()
    assert "in 2 sampled segmentations, one an epoch" in log
    losses = [float(x) for x in re.findall(r"loss ([\d.]+)  lr", log)]
    assert np.mean(losses[-5:]) < np.mean(losses[:5])

    capsys.readouterr()
    changed = [*sampled[:1], "data.subword_sampling.alpha=0.5", *sampled[2:], "train.max_steps=34"]
    assert train(toy, resumed, *changed) == 2
    assert "data.subword_sampling.alpha: 0.3 -> 0.5" in capsys.readouterr().err


def test_bad_sampling_settings_are_one_line_each(toy, capsys):
    cases = {
        ("data.subword_sampling.alpha=0.1", "data.subword_sampling.nbest=8"): (
            "nbest picks among a unigram model's best segmentations"
        ),
        ("data.subword_sampling.alpha=0",): "data.subword_sampling.alpha = 0",
        ("data.subword_sampling.alpha=1.5",): "data.subword_sampling.alpha = 1.5",
        ("data.subword_sampling.nbest=1",): "sampling among the 1 best is no sampling",
        ("data.subword_sampling.segmentations=0",): "data.subword_sampling.segmentations = 0",
    }
    for sets, error in cases.items():
        options = [x for s in sets for x in ("--set", s)]
        assert run_cli("config", "--config", toy / "run.yaml", *options) == 2
        line = capsys.readouterr().err
        assert line.count("\n") == 1 and error in line


def test_prepare_says_how_many_samples_it_keeps(toy, tmp_path, capsys):
    sets = [
        "--set",
        "data.subword_sampling.alpha=0.1",
        "--set",
        "data.subword_sampling.segmentations=2",
    ]
    assert run_cli("prepare", toy / "run.yaml", "--run-dir", tmp_path / "run", *sets) == 0
    err = capsys.readouterr().err
    assert "prepared 300 training pairs and 2 sampled segmentations of them" in err
    corpora = sorted(path.name for path in (tmp_path / "run/tokenizer/corpora").iterdir())
    assert len(corpora) == 3 and corpora[1].endswith("-0") and corpora[2].endswith("-1")


def test_nbest_with_a_given_bpe_model_is_one_line(text, toy, tmp_path):
    lines = corpus.read_lines(toy / "data/train.tgt")
    bpe = train_tokenizer(TokenizerConfig(vocab_size=120), lines, lines, tmp_path / "bpe")
    assert bpe.algorithms == {"bpe"}
    given = TokenizerConfig(model=str(tmp_path / "bpe/joint.model"))
    sampling = SubwordSamplingConfig(alpha=0.1, nbest=4, segmentations=1)
    data = text.model_copy(update={"subword_sampling": sampling})
    with pytest.raises(UserError, match="nbest picks among a unigram model's best .* is bpe"):
        prepare_training_data(data, given, tmp_path / "run", seed=1)
