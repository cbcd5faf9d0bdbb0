"""Guided alignment (`data.alignments`, `train.alignment_weight`): word alignments read with
their corpus, mapped to its pieces, kept in the prepared corpus, made each batch's gold
attention, and a loss that draws the attention towards it."""

from __future__ import annotations

import json
import logging
import math
import re

import numpy as np
import pytest
import torch
from cli_helpers import run_cli, train, train_straight_and_resumed

from seq2seq.checkpoint import RunDir
from seq2seq.config import load_config
from seq2seq.data.alignments import PieceLinks, gold_attention
from seq2seq.data.corpus import read_lines, read_pairs
from seq2seq.data.tokenizer import PAD_ID
from seq2seq.data.training_data import prepare_training_data
from seq2seq.decode.alignment import alignment_error_rate
from seq2seq.decode.forced import forced_steps
from seq2seq.decode.loading import load_trained_model
from seq2seq.errors import UserError
from seq2seq.models.build import build_model
from seq2seq.train.datasets import load_datasets
from seq2seq.train.loss import alignment_cross_entropy

GUIDED = ("train.max_steps=60", "train.valid_every=60", "train.optimizer.lr=0.01",
          "model.dropout=0", "train.alignment_weight=1")  # fmt: skip


def here(pair: int) -> str:
    return f"pair {pair}"


def test_word_links_become_links_of_every_piece_of_both_words():
    # source pieces: ▁a ▁bc d ▁e (words a, bcd, e); target: x ▁y z (first piece unmarked)
    starts = np.array([True, True, False, True, False, True, False])  # by id
    to_pieces = PieceLinks(starts, starts)
    texts = ["a bcd e", "a", "a bcd"], ["xq yz", "x", "xq"]
    ids = [[0, 1, 2, 3], [0], [0, 1, 2]], [[2, 5, 6], [0], [2]]
    lines = ["1-0 2?1 1-0", "", "0-0 1-0"]
    links, counts = to_pieces(lines, texts, ids, here)
    assert links.dtype == np.int32 and counts.tolist() == [6, 0, 3]
    assert links.tolist() == [
        [1, 0], [2, 0], [3, 1], [3, 2], [1, 0], [2, 0],  # the link given twice, twice
        [0, 0], [1, 0], [2, 0],
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("line", "texts", "message"),
    [
        ("0-2", ("a", "x y"), "pair 1: the link 0-2 is beyond the pair's 1 source and 2 target"),
        ("0-0", ("a b", "x"), "pair 1: the tokenizer makes 1 source words of a line of 2"),
        ("0:0", ("a", "x"), "pair 1: '0:0' is not a link"),
        ("0-0 1-23-4", ("a", "x"), "pair 1: '1-23-4' is not a link"),
    ],
)
def test_a_link_off_its_pair_is_one_line(line, texts, message):
    target = [[0], [0, 1]][len(texts[1].split()) - 1]  # a piece a target word, one source piece
    chunk = ["0-0", line], (["a", texts[0]], ["x", texts[1]]), ([[0], [0]], [[0], target])
    with pytest.raises(UserError, match=message):
        PieceLinks(np.ones(4, bool), np.ones(4, bool))(*chunk, here)


def test_gold_attention_spreads_each_target_position_over_its_linked_sources():
    links = [np.array([[0, 0], [1, 0], [2, 1]]), None, np.array([[0, 1]])]
    gold = gold_attention(links, np.array([0, 0, 1]), (3, 3, 4))
    expected = torch.zeros(3, 3, 4)
    expected[0, 0, :2], expected[0, 1, 2] = 0.5, 1.0
    expected[2, 1, 1] = 1.0  # moved one position on, past a tag
    torch.testing.assert_close(torch.from_numpy(gold), expected)


def test_the_loss_is_the_cross_entropy_of_the_attention_against_the_gold():
    attention = torch.tensor([[[0.5, 0.25, 0.25], [0.0, 1.0, 0.0]]])
    gold = torch.tensor([[[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]])  # the second row has no links
    expected = -(0.5 * math.log(0.5) + 0.5 * math.log(0.25))
    assert float(alignment_cross_entropy(attention, gold)) == pytest.approx(expected)
    sparse = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])  # an exact zero stays finite
    assert math.isfinite(float(alignment_cross_entropy(sparse, gold)))


def test_alignment_lines_follow_the_pairs_kept_and_name_their_line(tmp_path):
    for name, text in {
        "c.de": "a\n \nb c\n",
        "c.en": "x\ny\nz w\n",
        "c.align": "0-0\n\n1-1\n",
    }.items():
        (tmp_path / name).write_text(text)
    paths = tmp_path / "c.de", tmp_path / "c.en"
    (chunk,) = read_pairs(*paths, 10, align_path=tmp_path / "c.align")
    assert (chunk.src, chunk.align, chunk.lines, chunk.empty) == (
        ["a", "b c"],
        ["0-0", "1-1"],
        [1, 3],
        1,
    )
    (tmp_path / "c.align").write_text("0-0\n")
    with pytest.raises(UserError, match="c.de has 3 lines, .*c.align has 1"):
        list(read_pairs(*paths, 10, align_path=tmp_path / "c.align"))


def kept_attention(model, batch) -> torch.Tensor:
    model.keeps_attention = True
    with torch.no_grad():
        model(batch.src, batch.src_mask, batch.tgt_in)
    model.keeps_attention = False
    return model.take_kept_attention()


@pytest.mark.parametrize("arch", ["rnn", "rnn-hard", "transformer"])
def test_the_attention_trained_on_is_the_one_forced_alignment_reads(toy, tmp_path, arch):
    """The teacher-forced pass keeps its last layer's attention, heads averaged: the weights
    that `score --alignments` links by (the decoder's steps, heads averaged; the RNN's hard
    attention: the distribution it chooses from, whose most probable position it links)."""
    settings = {"data.alignments": True}
    if arch == "rnn-hard":
        settings |= {"model.attention.normalizer": "hard"}
    if arch == "transformer":
        settings |= {"model.arch": "transformer", "model.attention.type": "multihead",
                     "model.attention.heads": 2, "model.embed_dim": 16}  # fmt: skip
    cfg = load_config(toy / "run.yaml", [f"{key}={value}" for key, value in settings.items()])
    data = load_datasets(cfg, RunDir(tmp_path), logging.getLogger("test"))
    vocab = data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size
    model = build_model(cfg.model, *vocab, PAD_ID)
    model.eval()
    batch = data.train.batch(list(range(8)))
    kept = kept_attention(model, batch)
    with torch.no_grad():
        steps = forced_steps(model, batch)[0]
    steps = steps.mean(2) if steps.dim() == 4 else steps
    if arch == "rnn-hard":  # it translates from the most probable position: the same link
        real = batch.tgt_out != PAD_ID
        assert (kept.argmax(-1) == steps.argmax(-1))[real].all()
    else:
        torch.testing.assert_close(kept, steps, atol=1e-5, rtol=0)
    assert batch.alignment.shape == kept.shape and batch.alignment.sum() > 0


def test_guided_attention_aligns_words_that_unguided_attention_does_not(toy, tmp_path):
    """The toy RNN, 60 updates with the gold alignments and without (the same seed): its
    forced alignments of the training pairs have less than 0.6 times the error rate.
    (Measured: 32.1 against 71.3, 26.7 against 70.2, 25.2 against 68.6, seeds 1-3.)"""
    data = toy / "data"
    rates, logged = [], {}
    for guided in (True, False):
        run = tmp_path / f"guided={guided}"
        assert train(toy, run, f"data.alignments={str(guided).lower()}", *GUIDED) == 0
        out = tmp_path / f"{guided}.align"
        assert run_cli("score", "--run", run, "--src", data / "train.src", "--ref",
                       data / "train.tgt", "--alignments", out) == 0  # fmt: skip
        rates.append(alignment_error_rate(read_lines(out), read_lines(data / "train.align")).aer)
        lines = (run / "train.log").read_text()
        logged[guided] = [float(x) for x in re.findall(r"loss [\d.]+  alignment ([\d.]+)", lines)]
    assert rates[0] < 0.6 * rates[1]
    assert len(logged[True]) == 60 and not logged[False]  # a line an update: log_every=1
    assert logged[True][-1] < 0.5 * logged[True][0]


def test_validation_scores_alignments_as_score_and_evaluate_alignments_do(toy, tmp_path):
    """data.valid_alignments: a validation's AER (its log line, summary.json) is the rate
    that `score --alignments` and `evaluate-alignments` give the checkpoint it validated."""
    data, run, out = toy / "data", tmp_path / "run", tmp_path / "valid.align"
    assert train(toy, run, "data.alignments=true", "data.valid_alignments=true", *GUIDED) == 0
    assert run_cli("score", "--run", run, "--checkpoint", "last", "--src", data / "valid.src",
                   "--ref", data / "valid.tgt", "--alignments", out) == 0  # fmt: skip
    expected = alignment_error_rate(read_lines(out), read_lines(data / "valid.align")).to_dict()
    validation = json.loads(RunDir(run).summary.read_text())["validations"][-1]
    assert validation["step"] == 60 and validation["aer"] == expected["aer"] < 100
    assert f"AER {expected['aer']:.2f}" in (run / "train.log").read_text()


def test_train_metric_aer_keeps_the_checkpoint_of_the_lowest_validation_aer(toy, tmp_path):
    run = tmp_path / "run"
    settings = [*GUIDED, "train.valid_every=10", "train.metric=aer", "train.patience=null"]
    assert train(toy, run, "data.alignments=true", "data.valid_alignments=true", *settings) == 0
    summary = json.loads(RunDir(run).summary.read_text())
    rates = {v["step"]: v["aer"] for v in summary["validations"]}
    best = min(rates, key=lambda step: (rates[step], step))  # the first of equal ones
    assert len(rates) == 6 and summary["best_step"] == best
    assert round(summary["best_aer"], 2) == rates[best]
    best_checkpoint = torch.load(run / "checkpoints/best.pt", weights_only=True)
    assert best_checkpoint["step"] == best and round(best_checkpoint["score"], 2) == rates[best]


def test_train_metric_aer_without_gold_validation_links_is_refused(toy):
    with pytest.raises(UserError, match="train.metric aer picks the checkpoint by the"):
        load_config(toy / "run.yaml", ["train.metric=aer"])


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            lambda gold: gold[:-1],
            r"valid.align has 11 lines for the 12 pairs of its corpus; give one",
        ),
        (lambda gold: ["0-99", *gold[1:]], r"valid.align, line 1: the link 0-99 is beyond"),
        (lambda gold: ["0:1", *gold[1:]], r"valid.align, line 1: '0:1' is not a link"),
    ],
)
def test_gold_validation_alignments_that_do_not_fit_are_one_line_before_training(
    toy, tmp_path, lines, message
):
    for side in ("src", "tgt"):
        (tmp_path / f"valid.{side}").write_text((toy / f"data/valid.{side}").read_text())
    gold = read_lines(toy / "data/valid.align")
    (tmp_path / "valid.align").write_text("".join(line + "\n" for line in lines(gold)))
    cfg = load_config(toy / "run.yaml", [f"data.valid={tmp_path / 'valid'}"])
    cfg.data.valid_alignments = True
    with pytest.raises(UserError, match=message):
        load_datasets(cfg, RunDir(tmp_path / "run"), logging.getLogger("test"))


def test_a_guided_run_resumes_exactly(toy, tmp_path):
    straight, resumed = train_straight_and_resumed(
        toy, tmp_path, "data.alignments=true", "model.dropout=0", steps=4, stop=2
    )
    weights = [
        load_trained_model(RunDir(run), "last")[2].state_dict() for run in (straight, resumed)
    ]
    for name, value in weights[0].items():
        torch.testing.assert_close(weights[1][name], value, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["model.arch=transformer", "model.attention.normalizer=hard"],
            "data.alignments guides the attention's weights, and the Transformer's hard",
        ),
        (["data.alignments=[true, false]"], "alignments has 2 values for 1 training corpus"),
        (["model.attention.type=none"], "model.attention.type none has uniform ones"),
    ],
)
def test_guidance_that_cannot_be_given_is_one_line(toy, overrides, message):
    with pytest.raises(UserError, match=message):
        load_config(toy / "run.yaml", ["data.alignments=true", *overrides])


def test_a_missing_alignment_file_is_one_line(toy, tmp_path, capsys):
    for side in ("src", "tgt"):
        (tmp_path / f"c.{side}").write_text((toy / f"data/train.{side}").read_text())
    assert train(toy, tmp_path / "run", f"data.train={tmp_path / 'c'}", "data.alignments=true") == 2
    assert "corpus file not found: tried" in capsys.readouterr().err


def test_the_prepared_corpus_keeps_its_links_apart_and_follows_its_alignment_file(toy, tmp_path):
    """With alignments a corpus is prepared apart from itself without; an alignment file
    changed since is prepared again."""
    for suffix in ("src", "tgt", "align"):
        (tmp_path / f"c.{suffix}").write_text((toy / f"data/train.{suffix}").read_text())
    train_set = f"data.train={tmp_path / 'c'}"

    def first_links(aligned: bool) -> list | None:
        cfg = load_config(toy / "run.yaml", [train_set, f"data.alignments={str(aligned).lower()}"])
        data = prepare_training_data(cfg.data, cfg.tokenizer, tmp_path / "tok", seed=1)
        found = data.corpora[0].links(np.array([0]))
        return None if found is None else found[0].tolist()

    assert first_links(False) is None
    links = first_links(True)
    assert links and first_links(False) is None  # both kept
    lines = read_lines(tmp_path / "c.align")
    (tmp_path / "c.align").write_text("\n".join(["", *lines[1:]]) + "\n")
    assert links != [] and first_links(True) == []


def test_each_sampled_segmentation_has_its_own_links(toy, tmp_path):
    sampling = ["data.subword_sampling.alpha=0.5", "data.subword_sampling.segmentations=2"]
    cfg = load_config(toy / "run.yaml", ["data.alignments=true", *sampling])
    data = prepare_training_data(cfg.data, cfg.tokenizer, tmp_path / "tok", seed=1)
    for corpora in data.samples:
        links, pieces = corpora[0].links(np.arange(20)), corpora[0].tgt.rows(np.arange(20))
        assert all(len(found) >= len(row) for found, row in zip(links, pieces, strict=True))
    first, second = (corpora[0].links(np.arange(20)) for corpora in data.samples)
    assert any(a.shape != b.shape or (a != b).any() for a, b in zip(first, second, strict=True))


def test_a_tagged_corpus_has_its_links_one_position_on(toy, tmp_path):
    batches = []
    for tags in ("null", '["<t>"]'):
        sets = ["data.alignments=true", f"data.tags={tags}", 'tokenizer.user_symbols=["<t>"]']
        cfg = load_config(toy / "run.yaml", sets)  # one tokenizer for both
        data = load_datasets(cfg, RunDir(tmp_path / tags), logging.getLogger("test"))
        batches.append(data.train.batch(list(range(8))))
    untagged, tagged = batches
    assert (tagged.src[:, 1:] == untagged.src).all()  # the same pairs, the tag first
    torch.testing.assert_close(tagged.alignment[..., 1:], untagged.alignment, rtol=0, atol=0)
    assert not tagged.alignment[..., 0].any()


def model_of(cfg, data, weights=None):
    vocab = data.tokenizer.src_vocab_size, data.tokenizer.tgt_vocab_size
    model = build_model(cfg.model, *vocab, PAD_ID)
    if weights is not None:
        model.load_state_dict(weights)
    return model.eval()


def test_the_models_attention_is_its_alignment_layers_first_heads(toy, tmp_path):
    """model.alignment_layer and alignment_heads choose what a step's attention is (and so
    alignments, maps, the coverage penalty), and what guided alignment trains."""
    base = ["model.arch=transformer", "model.attention.type=multihead", "model.embed_dim=16",
            "model.decoder_layers=2", "model.attention.heads=2",
            "data.alignments=true"]  # fmt: skip
    cfg = load_config(toy / "run.yaml", base)
    data = load_datasets(cfg, RunDir(tmp_path), logging.getLogger("test"))
    batch = data.train.batch(list(range(8)))
    weights = model_of(cfg, data).state_dict()
    attention = {}
    for layer, heads in ((-1, 0), (0, 0), (0, 1)):
        sets = [*base, f"model.alignment_layer={layer}", f"model.alignment_heads={heads}"]
        model = model_of(load_config(toy / "run.yaml", sets), data, weights)
        with torch.no_grad():
            attention[layer, heads] = forced_steps(model, batch)[0]
        torch.testing.assert_close(
            kept_attention(model, batch), attention[layer, heads].mean(2), atol=1e-5, rtol=0
        )
    assert attention[0, 0].shape[2] == 2 and attention[0, 1].shape[2] == 1
    torch.testing.assert_close(attention[0, 1], attention[0, 0][:, :, :1], rtol=0, atol=0)
    assert not torch.allclose(attention[0, 0], attention[-1, 0])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.alignment_layer=1"], "alignment_layer 1 is outside the one attention"),
        (["model.arch=transformer", "model.decoder_layers=2", "model.alignment_layer=-3"],
         "alignment_layer -3 is outside the decoder's 2 layers"),
        (["model.alignment_heads=2"], "alignment_heads 2: the attention has 1 head;"),
    ],
)  # fmt: skip
def test_an_aligning_attention_that_is_not_there_is_one_line(toy, overrides, message):
    with pytest.raises(UserError, match=message):
        load_config(toy / "run.yaml", overrides)
