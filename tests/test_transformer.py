"""What is particular to the Transformer; the shared model contract is in test_models.py."""

import math

import pytest
import torch

from seq2seq.attention import MultiHead
from seq2seq.attention.scores import GeneralAttention, ScaledDotAttention
from seq2seq.config import ModelConfig, config_from_dict
from seq2seq.data.padded_batches import padding_mask
from seq2seq.errors import UserError
from seq2seq.export import unexportable
from seq2seq.models import build_model, transformer
from seq2seq.models.transformer import sinusoids


def tiny(**kw):
    options = {"embed_dim": 16, "hidden_dim": 16, "ff_dim": 32, "dropout": 0.0, **kw}
    cfg = ModelConfig(arch="transformer", encoder_layers=2, decoder_layers=2, **options)
    torch.manual_seed(0)
    return build_model(cfg, 30, 30, pad_id=0).eval()


def test_sinusoids_follow_the_formula():
    table = sinusoids(50, 8)
    for pos in (0, 7, 49):
        for i in range(4):
            angle = pos / 10000 ** (2 * i / 8)
            assert math.isclose(table[pos, 2 * i], math.sin(angle), abs_tol=1e-5)
            assert math.isclose(table[pos, 2 * i + 1], math.cos(angle), abs_tol=1e-5)


def test_a_target_position_never_sees_later_positions():
    model = tiny(attention={"type": "multihead"})
    src, mask = torch.randint(4, 30, (2, 5)), padding_mask(torch.tensor([5, 3]), 5)
    tgt = torch.randint(4, 30, (2, 6))
    changed = tgt.clone()
    changed[:, 3] = (tgt[:, 3] + 1 - 4) % 26 + 4
    with torch.no_grad():
        a, b = model(src, mask, tgt), model(src, mask, changed)
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert (a[:, 3:] - b[:, 3:]).abs().amax(-1).min() > 1e-4


def test_attention_comes_from_the_config_with_four_heads_by_default():
    model = tiny(attention={"type": "general"}, self_attention={"type": "scaled-dot", "heads": 2})
    for layer in model.decoder_layers:
        assert isinstance(layer.cross_attention, MultiHead) and layer.cross_attention.heads == 4
        assert isinstance(layer.cross_attention.inner, GeneralAttention)
    for layer in [*model.encoder_layers, *model.decoder_layers]:
        assert layer.self_attention.heads == 2
        assert type(layer.self_attention.inner) is ScaledDotAttention


def test_tied_and_shared_embeddings_are_one_tensor():
    model = tiny(tied_embeddings=True, shared_embeddings=True)
    assert model.output.weight is model.tgt_embed.tokens.weight
    assert model.src_embed.tokens.weight is model.tgt_embed.tokens.weight
    plain = tiny()
    assert plain.output.weight is not plain.tgt_embed.tokens.weight
    assert plain.src_embed.tokens.weight is not plain.tgt_embed.tokens.weight


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_post_norm_normalises_each_layer_output_and_pre_norm_does_not(norm):
    model = tiny(norm=norm)
    outputs = []
    model.encoder_layers[-1].register_forward_hook(lambda m, i, out: outputs.append(out))
    with torch.no_grad():
        model.encode(torch.randint(4, 30, (2, 7)), padding_mask(torch.tensor([7, 7]), 7))
    std = outputs[0].std(-1, unbiased=False)
    normalised = torch.allclose(std, torch.ones_like(std), atol=1e-3)
    assert normalised == (norm == "post")


def test_sources_longer_than_the_position_table_still_encode():
    model = tiny()
    length = 1500  # the table starts at 1024 positions
    src = torch.randint(4, 30, (1, length))
    with torch.no_grad():
        memory = model.encode(src, padding_mask(torch.tensor([length]), length))
    assert memory.keys.shape[:3] == (1, 2, length) and torch.isfinite(memory.keys).all()


@pytest.mark.parametrize("a, b", [("bahdanau", "concat"), ("scaled-dot", "multihead")])
def test_some_cross_attention_types_are_one_model_here(a, b):
    """Bahdanau differs from concat only in attending before the RNN cell, which the
    Transformer has not, and every type is multi-head here: the attention study runs one of
    each pair (configs/sweeps/attention_transformer.yaml)."""
    first, second = tiny(attention={"type": a}), tiny(attention={"type": b})
    src, mask = torch.randint(4, 30, (2, 5)), padding_mask(torch.tensor([5, 3]), 5)
    tgt = torch.randint(4, 30, (2, 6))
    assert first.state_dict().keys() == second.state_dict().keys()
    with torch.no_grad():
        assert torch.equal(first(src, mask, tgt), second(src, mask, tgt))


def test_the_cache_grows_and_a_state_advanced_twice_keeps_both_successors(monkeypatch):
    # Steps write their keys and values into preallocated buffers in place: past their
    # capacity they grow, and a state advanced twice must not let its second successor
    # overwrite what the first one reads.
    monkeypatch.setattr(transformer, "INITIAL_CACHE_LENGTH", 2)
    model = tiny()
    src = torch.randint(4, 30, (2, 5), generator=torch.Generator().manual_seed(1))
    mask = padding_mask(torch.tensor([5, 3]), 5)
    tgt = torch.randint(4, 30, (2, 7), generator=torch.Generator().manual_seed(2))
    other = torch.randint(4, 30, (2,), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(src, mask, tgt).log_softmax(-1)
        branch = model(src, mask, torch.cat([tgt[:, :3], other[:, None]], 1)).log_softmax(-1)
        memory = model.encode(src, mask)
        state = model.init_state(memory)
        for t in range(tgt.size(1)):
            if t == 3:
                side = model.decode_step(memory, state, other)  # written at 3 first
            step = model.decode_step(memory, state, tgt[:, t])
            torch.testing.assert_close(step.log_probs, full[:, t], atol=1e-5, rtol=1e-5)
            state = step.state
        torch.testing.assert_close(side.log_probs, branch[:, 3], atol=1e-5, rtol=1e-5)
        after = model.decode_step(memory, side.state, tgt[:, 4]).log_probs
        branch = model(src, mask, torch.cat([tgt[:, :3], other[:, None], tgt[:, 4:5]], 1))
        torch.testing.assert_close(after, branch.log_softmax(-1)[:, 4], atol=1e-5, rtol=1e-5)
    assert state.buffers.capacity >= tgt.size(1) > 2


@pytest.mark.parametrize(
    "options",
    [{"ffn_activation": kind} for kind in ("gelu", "silu", "swiglu", "geglu")]  # relu: all others
    + [
        {"norm_type": "rmsnorm"},
        {"norm": "post", "norm_type": "rmsnorm", "scale_embedding": False},
    ],
)
def test_every_activation_and_norm_learns_a_copy_task(options):
    """Each feed-forward activation and norm fits 8 pairs of the copy task: the
    cross-entropy falls below half of where it started in 20 updates."""
    model = tiny(**options).train()
    torch.manual_seed(1)
    src = torch.randint(4, 30, (8, 6))
    mask, tgt_in, tgt_out = padding_mask(torch.full((8,), 6), 6), src[:, :-1], src[:, 1:]
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(20):
        logits = model(src, mask, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt_out.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 2


def test_a_gated_feed_forward_has_the_parameters_of_an_ungated_one():
    def count(module):
        return sum(p.numel() for p in module.parameters())

    relu = tiny().encoder_layers[0].feed_forward
    gated = tiny(ffn_activation="swiglu").encoder_layers[0].feed_forward
    assert gated.gated and gated.expand.out_features == 2 * 21  # 2/3 of 32, rounded down
    assert abs(count(gated) - count(relu)) <= 3 * 16
    assert ModelConfig(arch="transformer", ffn_activation="swish").ffn_activation == "silu"
    rms = tiny(norm_type="rmsnorm").encoder_layers[0].attention_block.norm
    assert isinstance(rms, torch.nn.RMSNorm) and tiny(scale_embedding=False).src_embed.scale == 1


def test_biases_output_bias_and_final_norms_are_where_the_config_says():
    model = tiny(attention={"type": "multihead", "bias": True}, output_bias=True, final_norm=False)
    cross = model.decoder_layers[0].cross_attention
    assert cross.query_proj.bias is not None and cross.out_proj.bias is not None
    assert model.decoder_layers[0].self_attention.query_proj.bias is None
    assert model.output.bias is not None and isinstance(model.encoder_norm, torch.nn.Identity)
    post = tiny(norm="post", final_norm=True)
    assert isinstance(post.decoder_norm, torch.nn.LayerNorm)
    data = {"src": "a", "tgt": "b", "train": "t", "valid": "v"}
    model_section = {
        "arch": "transformer",
        "norm": "post",
        "final_norm": True,
        "attention": {"type": "multihead"},
    }
    cfg = config_from_dict({"data": data, "model": model_section})
    assert "no norm after post-norm layers" in unexportable(cfg)
    with pytest.raises(UserError, match="bahdanau attention with one head has no multi-head"):
        config_from_dict({"data": data, "model": {"attention": {"bias": True}}})
    for option in ({"output_bias": True}, {"norm_type": "rmsnorm"}, {"ffn_activation": "gelu"}):
        with pytest.raises(UserError, match="is the Transformer's, and the RNN has no such"):
            config_from_dict({"data": data, "model": {"arch": "rnn", **option}})
