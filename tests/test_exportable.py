"""Which models the CTranslate2 export can run is asked of the model's own modules: the
attention says whether it is multi-head scaled dot-product, the feed-forward names its
layers; export keeps no list of type names."""

from __future__ import annotations

import pytest

from seq2seq.attention import attention_names, build_attention
from seq2seq.config import AttentionConfig, config_from_dict
from seq2seq.export import unexportable
from seq2seq.models.transformer import FeedForward

DATA = {"src": "de", "tgt": "en", "train": "t", "valid": "v"}


def transformer(**model) -> dict:
    return {"data": DATA, "model": {"arch": "transformer", "embed_dim": 8, "hidden_dim": 8}
            | model}  # fmt: skip


@pytest.mark.parametrize("heads", [1, 2])
def test_only_multi_head_scaled_dot_says_it_is(heads):
    says = {
        kind
        for kind in attention_names()
        if build_attention(AttentionConfig(type=kind), 8, 8, heads).is_multi_head_scaled_dot
    }
    # One head of plain scaled-dot has no projections; `multihead` has them with any heads.
    assert says == ({"multihead"} if heads == 1 else {"multihead", "scaled-dot"})


@pytest.mark.parametrize(
    "model, fragment",
    [
        ({}, "model.attention.type is bahdanau"),
        ({"attention": {"type": "multihead"}}, None),
        ({"arch": "rnn", "embed_dim": 8}, "model.arch is rnn"),
        ({"attention": {"type": "general"}}, "model.attention.type is general with 4 head(s)"),
        (
            {"attention": {"type": "scaled-dot", "heads": 1}, "self_attention": {"heads": 1}},
            "model.attention.type is scaled-dot with 1 head(s); CTranslate2 implements "
            "multi-head scaled dot-product attention only: with 1 head(s), type multihead",
        ),
        ({"attention": {"type": "scaled-dot"}, "self_attention": {"heads": 2}}, "heads differ"),
    ],
)
def test_unexportable_names_the_section_and_what_would_run(model, fragment):
    problem = unexportable(config_from_dict(transformer(**model)))
    assert problem is None if fragment is None else fragment in problem


def test_the_feed_forward_names_its_layers_and_keeps_checkpoint_names():
    layers = FeedForward(4, 8, 0.1)
    assert (layers.expand.in_features, layers.expand.out_features) == (4, 8)
    assert (layers.contract.in_features, layers.contract.out_features) == (8, 4)
    assert list(layers.state_dict()) == ["0.weight", "0.bias", "3.weight", "3.bias"]
