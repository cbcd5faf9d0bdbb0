"""Decoding weights on the CPU: float32 prepacked for oneDNN (int8: test_python_api.py)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from test_search import ARCHS, source, tiny
from torch import nn

from seq2seq import Translator
from seq2seq.checkpoint import RunDir
from seq2seq.decode import cpu_weights
from seq2seq.decode.cpu_weights import (
    ONEDNN,
    PACKED_MIN_WEIGHTS,
    PackedLinear,
    PackedLSTM,
    packed_weights,
)
from seq2seq.decode.loading import load_trained_model
from seq2seq.decode.search.beams import SearchSettings
from seq2seq.decode.search.loop import search
from seq2seq.decode.search.strategy import BeamSearch

pytestmark = pytest.mark.skipif(ONEDNN is None, reason="this build of PyTorch has no oneDNN")

LINES = ["boka mimi toto tape podo", "toto", "mimi tape podo boka", "podo podo toto boka mimi"]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7, 24), (3, 5, 24), (1, 1, 24)])
def test_a_packed_layer_computes_what_the_linear_layer_does(bias, shape):
    torch.manual_seed(0)
    linear = nn.Linear(24, 40, bias=bias)
    packed = PackedLinear.of(linear)
    x = torch.randn(shape)
    with torch.inference_mode():
        assert packed.runs_packed(x)  # oneDNN's product, not nn.Linear's
        torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)
        if x.dim() == 3:  # not contiguous
            torch.testing.assert_close(
                packed(x.transpose(0, 1)), linear(x.transpose(0, 1)), rtol=1e-5, atol=1e-5
            )
    assert dict(packed.state_dict()).keys() == dict(linear.state_dict()).keys()
    assert packed.weight is linear.weight


def test_a_packed_layer_follows_its_weight_copies_and_trains_as_a_linear_layer():
    torch.manual_seed(0)
    linear = nn.Linear(16, 8)
    packed = PackedLinear.of(linear)
    x = torch.randn(5, 16)
    with torch.no_grad():
        linear.weight.mul_(-2.0)  # in place: the packed copy is stale until repacked
        torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)
    for twin in (copy.deepcopy(packed), pickle.loads(pickle.dumps(packed))):
        with torch.inference_mode():
            torch.testing.assert_close(twin(x), linear(x), rtol=1e-5, atol=1e-5)
    # with gradients it is nn.Linear's own path, to the bit
    assert not packed.runs_packed(x)
    out = packed(x)
    assert out.requires_grad and torch.equal(out, linear(x))
    out.sum().backward()
    expected = x.sum(0).expand(8, 16)
    torch.testing.assert_close(linear.weight.grad, expected)


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
def test_a_packed_lstm_steps_as_the_lstm_does(layers, bias, batch_first):
    torch.manual_seed(0)
    lstm = nn.LSTM(12, 20, num_layers=layers, bias=bias, batch_first=batch_first).eval()
    packed = PackedLSTM.of(lstm)
    step = torch.randn((5, 1, 12) if batch_first else (1, 5, 12))
    state = (torch.randn(layers, 5, 20), torch.randn(layers, 5, 20))
    with torch.inference_mode():
        assert packed.runs_packed(step, state)  # one oneDNN product per layer
        found, expected = packed(step, state), lstm(step, state)
    for got, want in zip(
        torch.utils._pytree.tree_leaves(found),
        torch.utils._pytree.tree_leaves(expected),
        strict=True,
    ):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert [p is q for p, q in zip(packed.parameters(), lstm.parameters(), strict=True)] == [
        True
    ] * len(list(lstm.parameters()))


def test_a_packed_lstm_runs_sequences_and_gradients_as_the_lstm_and_follows_its_weights():
    torch.manual_seed(0)
    lstm = nn.LSTM(6, 8, num_layers=2, dropout=0.5, batch_first=True)
    packed = PackedLSTM.of(lstm)
    sequence, step = torch.randn(3, 4, 6), torch.randn(3, 1, 6)
    state = (torch.zeros(2, 3, 8), torch.zeros(2, 3, 8))
    with torch.inference_mode():
        assert not packed.runs_packed(step, state)  # training: dropout between layers
        packed.eval(), lstm.eval()
        assert not packed.runs_packed(sequence, state)  # more than one step
        assert not packed.runs_packed(step, None)
        assert packed.runs_packed(step, state)
    assert not packed.runs_packed(step, state)  # gradients wanted: StepLSTM's own steps
    out, _ = packed(step, state)
    torch.testing.assert_close(out, lstm(step, state)[0])
    out.sum().backward()
    assert lstm.weight_ih_l0.grad is not None
    with torch.no_grad():
        lstm.weight_hh_l1.mul_(-2.0)  # in place: packed again before the next step
        torch.testing.assert_close(packed(step, state)[0], lstm(step, state)[0])
    for twin in (copy.deepcopy(packed), pickle.loads(pickle.dumps(packed))):
        with torch.inference_mode():
            assert twin.runs_packed(step, state)
            torch.testing.assert_close(twin(step, state)[0], lstm(step, state)[0])


def test_only_weights_big_enough_to_gain_are_packed():
    big = int(PACKED_MIN_WEIGHTS**0.5)
    model = packed_weights(nn.Sequential(nn.Linear(big, big), nn.Linear(big, big - 1)))
    assert [type(m) for m in model] == [PackedLinear, nn.Linear]


def test_the_translator_packs_the_linear_layers_on_the_cpu_and_decodes_as_before(
    trained, monkeypatch
):
    monkeypatch.setattr(cpu_weights, "PACKED_MIN_WEIGHTS", 0)  # the toy model's are small
    translator = Translator.load(trained, device="cpu")  # `auto` is a GPU where there is one
    layers = [m for m in translator.model.modules() if isinstance(m, nn.Linear)]
    assert layers and all(type(m) is PackedLinear for m in layers)
    _, tokenizer, model = load_trained_model(RunDir(trained))
    plain = Translator(model, tokenizer, translator.decode, torch.device("cpu"))
    assert not any(type(m) is PackedLinear for m in plain.model.modules())
    for beam in (1, 3):
        found = translator.hypotheses(LINES, beam=beam, nbest=1)
        expected = plain.hypotheses(LINES, beam=beam, nbest=1)
        assert [h[0].tokens for h in found] == [h[0].tokens for h in expected]
        for got, want in zip(found, expected, strict=True):
            assert got[0].score == pytest.approx(want[0].score, abs=1e-4)
            torch.testing.assert_close(got[0].attention, want[0].attention, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_packed_weights_search_as_the_model_does(arch, monkeypatch):
    monkeypatch.setattr(cpu_weights, "PACKED_MIN_WEIGHTS", 0)
    model = tiny(arch)
    packed = packed_weights(copy.deepcopy(model))
    assert (
        sum(type(m) is PackedLinear for m in packed.modules())
        == sum(type(m) is nn.Linear for m in model.modules())
        > 0
    )
    lstms = [m for m in model.modules() if isinstance(m, nn.LSTM) and not m.bidirectional]
    assert sum(type(m) is PackedLSTM for m in packed.modules()) == len(lstms)
    src, mask = source()
    limits = torch.full((src.size(0),), 8)
    for beam in (1, 4):
        found, expected = (
            search(m, src, mask, limits, BeamSearch(beam), SearchSettings(nbest=beam, alpha=0.6))
            for m in (packed, model)
        )
        assert [[h.tokens for h in hyps] for hyps in found] == [
            [h.tokens for h in hyps] for hyps in expected
        ]
        scores = [h.score for hyps in found for h in hyps]
        assert scores == pytest.approx([h.score for hyps in expected for h in hyps], abs=1e-5)
