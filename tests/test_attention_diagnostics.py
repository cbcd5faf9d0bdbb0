"""Attention diagnostics: their arithmetic, padding, the sites of each model, no side effects."""

import json
import math

import pytest
import torch
from torch import nn

from seq2seq.attention import attention_names, build_attention
from seq2seq.attention.diagnostics import DIAGNOSTICS, attention_sites, measure_attention
from seq2seq.config import AttentionConfig, ModelConfig
from seq2seq.data.padded_batches import make_batch
from seq2seq.models import build_model


class Harness(nn.Module):
    """A 'model' whose decoder attends with fixed queries over fixed keys: the batch only
    says which positions are real."""

    def __init__(self, attention: nn.Module, query: torch.Tensor, keys: torch.Tensor) -> None:
        super().__init__()
        self.decoder = nn.Module()
        self.decoder.attention = attention
        self.query, self.keys = query, keys

    def forward(self, src, src_mask, tgt_in):
        attention = self.decoder.attention
        keys = attention.prepare_keys(self.keys)
        return attention.attend(self.query, keys, keys, src_mask, need_weights=False)


def batch(src_lengths, tgt_lengths):
    """A batch of rows of these lengths (the source's EOS and the target's BOS included)."""
    src = [[5] * (n - 1) for n in src_lengths]
    tgt = [[5] * (n - 1) for n in tgt_lengths]
    return make_batch(src, tgt, list(range(len(src))))


def measure(name, query, keys, src_lengths, tgt_lengths, **options):
    torch.manual_seed(0)
    attention = build_attention(
        AttentionConfig(type=name, **options), query.size(-1), keys.size(-1)
    )
    harness = Harness(attention, query, keys)
    return measure_attention(harness, [batch(src_lengths, tgt_lengths)])["decoder.attention"]


def test_uniform_weights_have_normalised_entropy_one_and_uniform_sink_mass():
    query, keys = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    found = measure("none", query, keys, [5, 2], [3, 3])["mean"]
    assert found["entropy_norm"] == pytest.approx(1.0, abs=1e-6)
    assert found["entropy"] == pytest.approx((math.log(5) + math.log(2)) / 2, abs=1e-5)
    assert found["sink_mass"] == pytest.approx((1 / 5 + 1 / 2) / 2, abs=1e-6)
    assert found["energy_std"] == 0 and found["saturated"] == 0
    assert "query_norm" not in found and "key_norm" not in found  # `none` reads neither


def test_one_hot_weights_have_normalised_entropy_zero_and_are_saturated():
    keys = torch.eye(6)[:4].unsqueeze(0)  # orthonormal keys
    query = 100 * torch.eye(6)[[2, 0, 3]].unsqueeze(0)  # each query picks one key
    found = measure("dot", query, keys, [4], [3])["mean"]
    assert found["entropy_norm"] == pytest.approx(0.0, abs=1e-6)
    assert found["max_weight"] == pytest.approx(1.0) and found["saturated"] == 1.0
    assert found["sink_mass"] == pytest.approx(1 / 3, abs=1e-6)  # one query of 3 picks key 3
    assert found["energy_max_abs"] == pytest.approx(100.0)
    assert found["query_norm"] == pytest.approx(100.0) and found["key_norm"] == pytest.approx(1)


@pytest.mark.parametrize("name", ["dot", "general", "cosine", "bahdanau", "location", "local-p"])
def test_padding_never_counts(name):
    """Garbage at padded keys and at padded queries changes no diagnostic."""
    torch.manual_seed(3)
    query, keys = torch.randn(2, 4, 8), torch.randn(2, 6, 8)
    lengths = ([6, 3], [4, 2])
    options = {"max_source_len": 8} if name == "location" else {}
    clean = measure(name, query, keys, *lengths, **options)
    query[1, 2:], keys[1, 3:] = 1e4 * torch.randn(2, 8), float("nan")
    assert measure(name, query, keys, *lengths, **options) == clean


@pytest.mark.parametrize("dim", [16, 64, 256])
def test_energy_spread_grows_as_sqrt_d_for_dot_and_stays_one_for_scaled_dot(dim):
    """Vaswani et al.'s footnote: q . k of unit-variance components has variance d."""
    torch.manual_seed(dim)
    query, keys = torch.randn(8, 32, dim), torch.randn(8, 64, dim)
    lengths = ([64] * 8, [32] * 8)
    dot = measure("dot", query, keys, *lengths)["mean"]["energy_std"]
    scaled = measure("scaled-dot", query, keys, *lengths)["mean"]["energy_std"]
    assert dot == pytest.approx(math.sqrt(dim), rel=0.1)
    assert scaled == pytest.approx(1.0, rel=0.1)


def test_cosine_energies_never_exceed_its_temperature():
    torch.manual_seed(4)
    query, keys = 50 * torch.randn(3, 5, 8), torch.randn(3, 7, 8)
    keys[0, 2] = 3 * query[0, 1]  # cos = 1 at one pair: the bound is reached
    found = measure("cosine", query, keys, [7, 7, 4], [5, 5, 5])["mean"]
    assert found["temperature"] == pytest.approx(10.0)
    assert found["energy_max_abs"] <= found["temperature"] * (1 + 1e-6)
    assert found["energy_max_abs"] == pytest.approx(10.0, rel=1e-5)
    assert found["query_norm"] == pytest.approx(1.0) and found["key_norm"] == pytest.approx(1)


def test_a_non_finite_diagnostic_is_recorded_not_raised():
    query, keys = torch.randn(1, 2, 8), torch.randn(1, 3, 8)
    keys[0, 1] = float("nan")
    found = measure("dot", query, keys, [3], [2])["mean"]
    assert math.isnan(found["entropy"]) and math.isnan(found["energy_std"])


@pytest.mark.parametrize("normalizer", ["softmax", "entmax"])
def test_every_diagnostic_is_reported_per_head_and_averaged(normalizer):
    torch.manual_seed(5)
    query, keys = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    found = measure("multihead", query, keys, [4, 3], [3, 2], heads=2, normalizer=normalizer)
    # Support sizes where weights can be exactly 0; entmax's learned alpha per head; no
    # learning signal without REINFORCE.
    sparse = {"support", "zeros"}
    every = set(DIAGNOSTICS) - {"reinforce_var"}
    expected = every - sparse if normalizer == "softmax" else {*every, "alpha"}
    assert found["heads"] == 2 and set(found["per_head"]) == expected
    for name, values in found["per_head"].items():
        pooled = max(values) if name == "energy_max_abs" else sum(values) / 2
        assert found["mean"][name] == pytest.approx(pooled, rel=1e-4)


def test_the_sites_of_each_architecture():
    rnn = build_model(ModelConfig(embed_dim=8, hidden_dim=8), 20, 20, 0)
    assert [(s.name, s.heads, s.queries, s.keys) for s in attention_sites(rnn)] == [
        ("decoder.attention", 1, "target", "source")
    ]
    cfg = ModelConfig(arch="transformer", embed_dim=8, hidden_dim=8, ff_dim=8, decoder_layers=2)
    sites = {
        s.name: (s.heads, s.queries, s.keys) for s in attention_sites(build_model(cfg, 20, 20, 0))
    }
    assert sites == {
        "encoder_layers.0.self_attention": (4, "source", "source"),
        "decoder_layers.0.self_attention": (4, "target", "target"),
        "decoder_layers.0.cross_attention": (4, "target", "source"),
        "decoder_layers.1.self_attention": (4, "target", "target"),
        "decoder_layers.1.cross_attention": (4, "target", "source"),
    }


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
@pytest.mark.parametrize("name", attention_names())
def test_measuring_changes_no_output_state_or_random_number(arch, name):
    cfg = ModelConfig(arch=arch, embed_dim=8, hidden_dim=8, ff_dim=8, attention={"type": name})
    torch.manual_seed(6)
    model = build_model(cfg, 20, 20, 0).train()
    pairs = batch([4, 6, 2], [3, 5, 4])
    before = model(pairs.src, pairs.src_mask, pairs.tgt_in)
    torch.manual_seed(7)
    found = measure_attention(model, [pairs])
    assert model.training and torch.equal(torch.get_rng_state(), torch.manual_seed(7).get_state())
    torch.manual_seed(6)
    build_model(cfg, 20, 20, 0)  # the same random numbers as before the first forward
    assert torch.equal(model(pairs.src, pairs.src_mask, pairs.tgt_in), before)
    assert all("recorder" not in vars(site.module) for site in attention_sites(model))
    sink = [entry for entry in found.values() if entry["keys"] == "source"]
    assert sink and all(0 <= entry["mean"]["sink_mass"] <= 1 for entry in sink)


def identical(a, b) -> bool:
    """Nested dicts and lists of tensors equal bit for bit."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def test_training_with_diagnostics_equals_training_without_and_logs_every_validation(toy, tmp_path):
    from cli_helpers import train
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    on, off = tmp_path / "on", tmp_path / "off"
    budget = ["train.max_steps=6", "train.valid_every=3"]
    assert train(toy, on, "train.max_steps=3", "train.valid_every=3") == 0
    assert train(toy, on, *budget) == 0  # resumed: the diagnostics at step 3 are kept
    assert train(toy, off, *budget, "train.attention_diagnostics=false") == 0
    last = [torch.load(run / "checkpoints/last.pt", weights_only=True) for run in (on, off)]
    assert identical(last[0]["model"], last[1]["model"])
    assert identical(last[0]["optimizer"], last[1]["optimizer"])
    summaries = [json.loads((run / "summary.json").read_text()) for run in (on, off)]
    measured = [v.pop("attention") for v in summaries[0]["validations"]]
    assert [v["step"] for v in summaries[0]["validations"]] == [3, 6]
    assert summaries[0]["validations"] == summaries[1]["validations"]
    assert all(
        m["decoder.attention"]["mean"].keys() >= {"entropy_norm", "sink_mass"} for m in measured
    )
    events = EventAccumulator(str(on / "tensorboard")).Reload()
    steps = [e.step for e in events.Scalars("attention_entropy_norm/decoder.attention")]
    assert steps == [3, 6]


def test_bench_times_the_diagnostics_against_training_between_validations(toy, bench_row):
    row = bench_row("diagnostics", "--config", str(toy / "run.yaml"), "--steps", "2",
                    "--repeats", "2", "--threads", "1")  # fmt: skip
    # Seconds are rounded to 3 decimals, the seconds between validations to 1, the share
    # to 5: the figures agree within what their rounding allows.
    diagnostics, update, every = row["diagnostics_s"], row["update_s"], row["valid_every"]
    half = 0.0005
    between = row["train_s_between_validations"]
    assert abs(between - update * every) <= half * every + 0.05
    share = row["diagnostics_share_of_training"]
    low = (diagnostics - half) / ((update + half) * every)
    high = (diagnostics + half) / (max(update - half, 1e-9) * every)
    assert low - 5e-6 <= share <= high + 5e-6
    low, high = row["diagnostics_s_range"]
    assert 0 < low <= row["diagnostics_s"] <= high
