"""Attention dropout (`model.attention.dropout`, `model.self_attention.dropout`): only
while training, on the weights of every type (the fused path too), unbiased, and a
training-only field: it does not change what a trained model computes."""

from __future__ import annotations

import pytest
import torch
from cli_helpers import run_cli, train_straight_and_resumed
from test_cli import parameters

from seq2seq.attention import attention_names, build_attention
from seq2seq.config import AttentionConfig

B, TQ, TK, D = 2, 3, 7, 8


def inputs(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    query, keys, values = (torch.randn(B, t, D, generator=generator) for t in (TQ, TK, TK))
    mask = torch.ones(B, 1, TK, dtype=torch.bool)
    mask[1, :, 5:] = False  # the second row's last keys are padding
    return query, keys, values, mask


def pair(name: str, heads: int, dropout: float):
    """Modules of type `name` without and with dropout, with the same parameters."""
    modules = []
    for p in (0.0, dropout):
        torch.manual_seed(0)
        cfg = AttentionConfig(type=name, dropout=p)
        modules.append(build_attention(cfg, D, D, heads=heads))
    return modules


@pytest.mark.parametrize("name", attention_names())
@pytest.mark.parametrize("heads", [1, 2])
def test_only_training_drops_and_the_weights_stay_a_distribution(name, heads) -> None:
    plain, dropping = pair(name, heads, 0.5)
    query, keys, values, mask = inputs()
    positions = torch.arange(TQ).expand(B, TQ)
    for module in (plain, dropping):
        module.eval()
    expected = plain(query, keys, values, mask, positions)
    found = dropping(query, keys, values, mask, positions)
    assert torch.equal(found.context, expected.context)  # evaluation: no dropout at all
    dropping.train()
    trained = dropping(query, keys, values, mask, positions)
    assert torch.allclose(trained.weights, expected.weights)  # returned as they are
    if name != "none":  # `none` attends to nothing: there is no weight to drop
        assert not torch.allclose(trained.context, expected.context)


@pytest.mark.parametrize("heads", [1, 4])
def test_the_fused_path_drops_too_and_the_dropped_context_is_unbiased(heads) -> None:
    plain, dropping = pair("scaled-dot", heads, 0.3)
    query, keys, values, mask = inputs(1)
    plain.eval()
    expected = plain(query, keys, values, mask).context
    dropping.train()
    draws = torch.stack(
        [dropping(query, keys, values, mask, need_weights=False).context for _ in range(4000)]
    )
    assert not torch.allclose(draws[0], draws[1])  # dropped anew on every call
    # Kept weights are scaled by 1 / (1 - p): the mean context is the undropped one.
    error = (draws.mean(0) - expected).abs() / (draws.std(0) / 4000**0.5 + 1e-6)
    assert error.max() < 5


def test_hard_attention_refuses_dropout_in_one_line(toy, capsys) -> None:
    sets = ["--set", "model.attention.normalizer=hard", "--set", "model.attention.dropout=0.1"]
    assert run_cli("config", "--config", toy / "run.yaml", *sets) == 2
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and "would drop hard attention's chosen position" in line


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_a_run_with_attention_dropout_trains_and_resumes_exactly(toy, tmp_path, arch) -> None:
    sets = [f"model.arch={arch}", "model.attention.dropout=0.2", "train.valid_every=2"]
    if arch == "transformer":
        sets += ["model.self_attention.dropout=0.2", "model.ff_dim=32"]
    straight, resumed = train_straight_and_resumed(toy, tmp_path, *sets, steps=4, stop=2)
    a, b = parameters(straight), parameters(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
