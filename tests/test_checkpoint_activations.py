"""Activation checkpointing (`train.checkpoint_activations`): the Transformer's layers keep
their inputs alone and recompute the rest in the backward pass, with the same dropout
masks: the same gradients, bit for bit; refused where it cannot be the same."""

import pytest
import torch
from cli_helpers import run_cli, train
from test_cli import parameters

from seq2seq.config import ModelConfig
from seq2seq.models import build_model

TRANSFORMER = (
    "model.arch=transformer", "model.embed_dim=16", "model.hidden_dim=16", "model.ff_dim=32",
    "model.encoder_layers=2", "model.decoder_layers=2", "model.attention.type=multihead",
    "train.valid_every=4",
)  # fmt: skip


def tiny(positions, normalizer):
    cfg = ModelConfig(
        arch="transformer", embed_dim=32, hidden_dim=32, ff_dim=64, encoder_layers=2,
        decoder_layers=2, dropout=0.3, positions=positions,
        attention={"type": "multihead", "dropout": 0.2, "normalizer": normalizer},
    )  # fmt: skip
    torch.manual_seed(0)
    return build_model(cfg, 50, 50, pad_id=0).train()


def counted(forward, runs):
    """`forward`, noting each call in `runs` (a hook would miss the recomputation)."""

    def run(*args, **kwargs):
        runs.append(1)
        return forward(*args, **kwargs)

    return run


def step(model, checkpointed):
    """The logits and gradients of one training pass, and how often the layers ran."""
    model.checkpoint_activations = checkpointed
    model.zero_grad()
    runs = []
    for layer in [*model.encoder_layers, *model.decoder_layers]:
        layer.forward = counted(type(layer).forward.__get__(layer), runs)
    generator = torch.Generator().manual_seed(3)
    src, tgt = (
        torch.randint(4, 50, (3, 7), generator=generator),
        torch.randint(4, 50, (3, 6), generator=generator),
    )
    torch.manual_seed(5)  # the dropout masks
    logits = model(src, torch.ones(3, 1, 7, dtype=torch.bool), tgt)
    logits.log_softmax(-1).mean().backward()
    return logits.detach(), [p.grad.clone() for p in model.parameters()], len(runs)


@pytest.mark.parametrize(
    "positions, normalizer", [("sinusoidal", "softmax"), ("relative", "entmax15")]
)
def test_recomputed_layers_give_the_same_gradients_bit_for_bit(positions, normalizer):
    model = tiny(positions, normalizer)
    kept, kept_grads, kept_runs = step(model, False)
    again, grads, runs = step(model, True)
    assert torch.equal(kept, again)
    assert all(torch.equal(a, b) for a, b in zip(kept_grads, grads, strict=True))
    assert (kept_runs, runs) == (4, 8)  # each of the 4 layers ran again in the backward pass
    assert step(model.eval(), True)[2] == 4  # evaluation never recomputes


def test_a_run_resumed_with_checkpointing_is_the_run_without(toy, tmp_path):
    """The switch may change on resume: 4 updates without it, 4 more with it, end where 8
    without it end."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    # On a GPU, checkpointing trains op by op, and a CUDA graph's padded shapes would draw
    # other dropout masks: both runs op by op (the setting does nothing on a CPU).
    settings = (*TRANSFORMER, "train.cuda_graphs=false")
    assert train(toy, straight, *settings, "train.max_steps=8") == 0
    assert train(toy, resumed, *settings, "train.max_steps=4") == 0
    on = ("train.max_steps=8", "train.checkpoint_activations=true")
    assert train(toy, resumed, *settings, *on) == 0
    a, b = parameters(straight), parameters(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "sets, error",
    [
        ((), "the RNN has none to recompute"),
        ((*TRANSFORMER, "model.attention.normalizer=hard", "model.attention.hard.estimator=gumbel"),
         "would draw hard attention's positions anew"),
    ],
)  # fmt: skip
def test_where_recomputing_cannot_be_the_same_it_is_one_line(toy, capsys, sets, error):
    args = [x for s in (*sets, "train.checkpoint_activations=true") for x in ("--set", s)]
    assert run_cli("config", "--config", toy / "run.yaml", *args) == 2
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and error in line
