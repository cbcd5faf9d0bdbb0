"""The attention temperature g: learned or fixed, its initial value, its diagnostics."""

import math

import pytest
import torch
from test_attention_diagnostics import measure

from seq2seq.attention import build_attention
from seq2seq.config import AttentionConfig, config_from_dict
from seq2seq.data.padded_batches import padding_mask
from seq2seq.errors import UserError
from seq2seq.export import unexportable


def make(heads=1, dim=8, **options):
    torch.manual_seed(0)
    return build_attention(AttentionConfig(**options), dim, dim, heads)


def inputs(dim=8):
    torch.manual_seed(1)
    query, keys, values = 30 * torch.randn(2, 3, dim), *torch.randn(2, 2, 5, dim)
    return query, keys, values, padding_mask(torch.tensor([5, 2]), 5)


def temperature(attention):
    return attention.learned_scales()["temperature"].item()


def train_step(attention):
    """One SGD step on a loss that depends on the temperature."""
    query, keys, values, mask = inputs()
    optimizer = torch.optim.SGD(attention.parameters(), lr=0.5)
    loss = (attention(query / 30, keys, values, mask).weights[:, :, 0] ** 2).sum()
    loss.backward()
    optimizer.step()


@pytest.mark.parametrize("kind", ["cosine", "scaled-dot", "dot"])
def test_a_fixed_temperature_is_no_parameter_and_does_not_move_in_training(kind):
    attention = make(2, type=kind, temperature=3.0, learn_temperature=False)
    assert "inner.log_scale" not in dict(attention.named_parameters())
    assert "inner.log_scale" in attention.state_dict()  # a checkpoint records it
    before = attention.query_proj.weight.clone()
    train_step(attention)
    assert not torch.equal(attention.query_proj.weight, before)  # training did train
    assert temperature(attention.inner) == pytest.approx(3.0, rel=1e-6)


@pytest.mark.parametrize("kind", ["cosine", "scaled-dot", "dot"])
def test_a_learned_temperature_starts_at_its_value_and_moves_in_training(kind):
    attention = make(2, type=kind, temperature=3.0)
    assert "inner.log_scale" in dict(attention.named_parameters())
    assert temperature(attention.inner) == pytest.approx(3.0, rel=1e-6)
    train_step(attention)
    assert abs(temperature(attention.inner) - 3.0) > 1e-3


def test_cosine_keeps_its_learned_ten_by_default():
    attention = make(type="cosine")
    assert attention.log_scale.requires_grad
    assert attention.log_scale.item() == pytest.approx(math.log(10.0), rel=1e-7)


@pytest.mark.parametrize("value", [1.0, 2.5])
def test_cosine_energies_lie_within_plus_minus_the_temperature(value):
    attention = make(type="cosine", temperature=value, learn_temperature=False)
    query, keys, *_ = inputs()
    keys[0, 1] = -4 * query[0, 2]  # cos = -1 at one pair: the bound is reached
    energies = attention.score(query, attention.prepare_keys(keys))
    assert energies.abs().max() <= value * (1 + 1e-6)
    assert energies.min() == pytest.approx(-value, rel=1e-5)


@pytest.mark.parametrize("heads", [1, 2])
def test_scaled_dot_with_a_learned_temperature_of_one_is_plain_scaled_dot_at_init(heads):
    plain = make(heads, type="scaled-dot")
    tempered = make(heads, type="scaled-dot", temperature=1.0)
    query, keys, values, mask = inputs()
    for need_weights in (True, False):
        expected = plain(query, keys, values, mask, need_weights=need_weights)
        found = tempered(query, keys, values, mask, need_weights=need_weights)
        assert torch.equal(found.context, expected.context)
        if need_weights:
            assert torch.equal(found.weights, expected.weights)


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("learn", [True, False])
def test_scaled_dot_fused_and_weighted_paths_agree_with_a_temperature(heads, learn):
    """Without weights, scaled-dot heads take PyTorch's fused attention (multi-head: over
    all heads at once), which must apply the temperature too."""
    attention = make(heads, type="scaled-dot", temperature=4.0, learn_temperature=learn)
    query, keys, values, mask = inputs()
    fused = attention(query, keys, values, mask, need_weights=False)
    weighted = attention(query, keys, values, mask).context
    assert fused.weights is None
    torch.testing.assert_close(fused.context, weighted)


def test_a_tempered_scaled_dot_is_not_what_other_engines_run():
    assert make(4, type="scaled-dot").is_multi_head_scaled_dot
    assert not make(4, type="scaled-dot", temperature=1.0).is_multi_head_scaled_dot


def test_diagnostics_report_a_fixed_temperature():
    query, keys = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    options = {"temperature": 2.0, "learn_temperature": False}
    found = measure("cosine", query, keys, [4, 2], [3, 3], **options)["mean"]
    assert found["temperature"] == pytest.approx(2.0)
    assert found["energy_max_abs"] <= 2.0 * (1 + 1e-6)
    assert "temperature" not in measure("scaled-dot", query, keys, [4, 2], [3, 3])["mean"]


def config(attention, arch="rnn"):
    data = {"src": "de", "tgt": "en", "train": "t", "valid": "v"}
    model = {"arch": arch, "embed_dim": 16, "hidden_dim": 16, "attention": attention}
    return config_from_dict({"data": data, "model": model})


@pytest.mark.parametrize("kind", ["general", "bahdanau", "location", "local-m", "none"])
def test_the_schema_refuses_a_temperature_for_a_type_that_does_not_read_it(kind):
    with pytest.raises(UserError, match=f"{kind} attention does not read temperature=2.0"):
        config({"type": kind, "temperature": 2})


def test_the_schema_refuses_a_fixed_temperature_without_its_value():
    with pytest.raises(UserError, match="learn_temperature: false .* give that value"):
        config({"type": "cosine", "learn_temperature": False})
    assert config({"type": "multihead", "temperature": 1, "learn_temperature": False})


def test_export_refuses_a_tempered_scaled_dot_saying_why():
    cfg = config({"type": "scaled-dot", "temperature": 1.0}, arch="transformer")
    assert unexportable(cfg).endswith("type multihead or scaled-dot, without a temperature")
    assert unexportable(config({"type": "scaled-dot"}, arch="transformer")) is None
