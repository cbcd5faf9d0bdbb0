import math

import pytest
import torch

from seq2seq.attention import (
    Attention,
    MultiHead,
    attention_class,
    attention_names,
    base,
    build_attention,
    register_attention,
)
from seq2seq.attention.scores import DotAttention, ScaledDotAttention
from seq2seq.config import ATTENTION_TYPES, AttentionConfig, ModelConfig, config_from_dict
from seq2seq.data.padded_batches import padding_mask
from seq2seq.errors import UserError
from seq2seq.models import build_model

TYPES = attention_names()
# Every type alone, and every type as multi-head (heads: 2) over its score.
CASES = [(name, heads) for heads in (1, 2) for name in TYPES]
IDS = [f"{name}-h{heads}" for name, heads in CASES]


def own_options(name, **options):
    """Small test values of the options type `name` reads, and `options`."""
    small = {"window": 2, "max_source_len": 6}
    return {k: v for k, v in small.items() if k in attention_class(name).options} | options


def make(name, query_dim=8, key_dim=8, **options):
    torch.manual_seed(0)
    return build_attention(
        AttentionConfig(type=name, **own_options(name, **options)), query_dim, key_dim
    )


def inputs(batch=3, tq=2, tk=6, dim=8, lengths=(6, 3, 1)):
    torch.manual_seed(1)
    query, keys, values = torch.randn(batch, tq, dim), torch.randn(batch, tk, dim), None
    values = torch.randn(batch, tk, dim)
    positions = torch.arange(tq).repeat(batch, 1) + torch.arange(batch)[:, None] * 2
    return query, keys, values, padding_mask(torch.tensor(lengths), tk), positions


def test_registry_holds_the_whole_family():
    assert set(TYPES) >= {
        "dot", "general", "concat", "bahdanau", "scaled-dot", "cosine",
        "location", "local-m", "local-p", "multihead", "none",
    }  # fmt: skip


def test_padding_mask():
    mask = padding_mask(torch.tensor([3, 1]), 4)
    assert mask.shape == (2, 1, 4)
    assert mask[0, 0].tolist() == [True, True, True, False]
    assert mask[1, 0].tolist() == [True, False, False, False]


@pytest.mark.parametrize("name, heads", CASES, ids=IDS)
def test_masked_keys_get_zero_weight_and_rows_sum_to_one(name, heads):
    attention = make(name, heads=heads)
    query, keys, values, mask, positions = inputs()
    out = attention(query, keys, values, mask, positions)
    assert out.context.shape == (3, 2, 8)
    if isinstance(attention, MultiHead):  # multi-head weights keep a head axis, even for 1
        assert out.weights.shape == (3, attention.heads, 2, 6)
    else:
        assert out.weights.shape == (3, 2, 6)
    assert torch.all(out.weights[1, ..., 3:] == 0)
    assert torch.all(out.weights[2, ..., 1:] == 0)
    sums = out.weights.sum(-1)
    if name == "local-p":  # the Gaussian scales the window's softmax down, unrenormalised
        assert torch.all(sums <= 1 + 1e-6) and torch.all(sums > 0)
    else:
        torch.testing.assert_close(sums, torch.ones_like(sums))
        # A single allowed key takes all the weight.
        assert torch.all(out.weights[2, ..., 0] == 1)


def test_local_p_renormalize_sums_to_one_and_only_rescales():
    query, keys, values, mask, positions = inputs()
    plain = make("local-p")(query, keys, values, mask, positions).weights
    renormalized = make("local-p", renormalize=True)(query, keys, values, mask, positions)
    sums = renormalized.weights.sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums))
    torch.testing.assert_close(renormalized.weights, plain / plain.sum(-1, keepdim=True))
    assert torch.all(plain.sum(-1) < 1 - 1e-3)  # without it, they really sum to less


@pytest.mark.parametrize("name, heads", CASES, ids=IDS)
def test_padding_keys_and_values_do_not_leak_into_the_context(name, heads):
    attention = make(name, heads=heads)
    query, keys, values, mask, positions = inputs()
    before = attention(query, keys, values, mask, positions).context
    keys[1, 3:], values[1, 3:], keys[2, 1:], values[2, 1:] = 1e3, -1e3, -1e3, 1e3
    torch.testing.assert_close(attention(query, keys, values, mask, positions).context, before)


# Multi-head over a score that ignores keys (location) or keys and queries (none) cannot
# train the projections it never uses.
KEY_BLIND_PROJECTIONS = {
    ("location", "key_proj.weight"),
    ("none", "key_proj.weight"),
    ("none", "query_proj.weight"),
}


@pytest.mark.parametrize("name, heads", CASES, ids=IDS)
def test_gradients_are_exact_and_reach_every_parameter(name, heads):
    attention = make(name, 4, 4, heads=heads).double()
    for param in attention.parameters():
        # A generic point: local-p's zero-initialised v_p puts p_t = S/2, on a window edge,
        # where the window (a step function of p_t) defeats finite differences.
        if not param.detach().any():
            torch.nn.init.normal_(param, std=0.5)
    query, keys, values, mask, positions = inputs(batch=2, tq=2, tk=4, dim=4, lengths=(4, 2))
    query, keys, values = (x.double().requires_grad_() for x in (query, keys, values))
    names = [name for name, _ in attention.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in attention.parameters())

    def run(query, keys, values, *params):
        state = dict(zip(names, params, strict=True))
        args = (query, keys, values, mask, positions)
        return tuple(torch.func.functional_call(attention, state, args))

    assert torch.autograd.gradcheck(run, (query, keys, values, *params), fast_mode=True)
    context, weights = attention(query, keys, values, mask, positions)
    (context.sum() + (weights * torch.randn_like(weights)).sum()).backward()
    for param_name, param in attention.named_parameters():
        if (name, param_name) in KEY_BLIND_PROJECTIONS:
            assert param.grad is None
        else:
            assert param.grad is not None and param.grad.abs().sum() > 0, param_name


def test_heads_1_builds_the_plain_module_and_multihead_wraps_scaled_dot():
    assert type(make("dot", heads=1)) is DotAttention
    assert type(make("dot", heads=2)) is MultiHead
    multihead = make("multihead", heads=4)
    assert multihead.heads == 4 and type(multihead.inner) is ScaledDotAttention
    assert make("bahdanau", heads=2).attends_before_cell
    assert not make("general", heads=2).attends_before_cell


def test_multi_head_with_identity_projections_is_the_score_per_slice_of_dims():
    attention = make("dot", heads=2)
    for proj in (attention.query_proj, attention.key_proj, attention.value_proj):
        torch.nn.init.eye_(proj.weight)
    torch.nn.init.eye_(attention.out_proj.weight)
    query, keys, values, mask, positions = inputs()
    out = attention(query, keys, values, mask, positions)
    for h, dims in enumerate((slice(0, 4), slice(4, 8))):
        energies = query[..., dims] @ keys[..., dims].transpose(1, 2)
        weights = energies.masked_fill(~mask, float("-inf")).softmax(-1)
        torch.testing.assert_close(out.weights[:, h], weights)
        torch.testing.assert_close(out.context[..., dims], weights @ values[..., dims])


def test_scaled_dot_is_dot_over_sqrt_d():
    query, keys, *_ = inputs()
    expected = make("dot").score(query, keys) / math.sqrt(8)
    torch.testing.assert_close(make("scaled-dot").score(query, keys), expected)


def test_cosine_ignores_the_scale_of_queries_and_keys_and_has_a_temperature():
    attention = make("cosine")
    query, keys, values, mask, positions = inputs()
    before = attention(query, keys, values, mask).weights
    after = attention(query * (torch.rand(3, 2, 1) * 9 + 0.1), keys * 7, values, mask).weights
    torch.testing.assert_close(after, before)
    energies = attention.score(query, attention.prepare_keys(keys))
    assert energies.abs().max() <= 10 + 1e-5 and energies.abs().max() > 1
    assert math.isclose(attention.log_scale.exp().item(), 10, rel_tol=1e-6)


def test_dot_general_concat_and_bahdanau_energies():
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    torch.testing.assert_close(make("dot", 4, 4).score(query, query), query @ query.mT)
    general = make("general", 4, 6)
    expected = torch.einsum("bqd,de,bke->bqk", query, general.proj.weight, keys)
    torch.testing.assert_close(general.score(query, general.prepare_keys(keys)), expected)
    for name in ("concat", "bahdanau"):
        attention = make(name, 4, 6)
        w1, w2, v = attention.query_proj.weight, attention.key_proj.weight, attention.v.weight[0]
        expected = torch.tanh((query @ w1.T).unsqueeze(2) + (keys @ w2.T).unsqueeze(1)) @ v
        torch.testing.assert_close(attention.score(query, attention.prepare_keys(keys)), expected)
        assert attention.attends_before_cell == (name == "bahdanau")


def test_local_m_attends_only_inside_the_window_around_the_step():
    attention = make("local-m", window=2)
    query, keys, values = torch.randn(1, 4, 8), torch.randn(1, 10, 8), torch.randn(1, 10, 8)
    mask = padding_mask(torch.tensor([8]), 10)
    positions = torch.tensor([[0, 4, 7, 12]])  # 12 lies past the source: clamped to 7
    weights = attention(query, keys, values, mask, positions).weights[0]
    steps = torch.arange(10)
    for row, centre in enumerate((0, 4, 7, 7)):
        inside = ((steps - centre).abs() <= 2) & (steps < 8)
        assert torch.all(weights[row, ~inside] == 0) and torch.all(weights[row, inside] > 0)
    with pytest.raises(ValueError, match="positions"):
        attention(query, keys, values, mask)


def test_local_p_centre_lies_in_the_source_and_the_window_follows_it():
    attention = make("local-p", window=1)
    torch.nn.init.normal_(attention.align[2].weight, std=5.0)  # spread p_t over [0, S]
    query, keys, values = torch.randn(2, 50, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 8)
    mask = padding_mask(torch.tensor([7, 3]), 7)
    centre = attention.aligned_position(query, mask)
    lengths = torch.tensor([[7.0], [3.0]])
    assert torch.all(centre >= 0) and torch.all(centre <= lengths)
    assert centre.max() > 5 and centre.min() < 1
    weights = attention(query, keys, values, mask).weights
    clamped = torch.minimum(centre, lengths - 1).unsqueeze(-1)
    assert torch.all(weights[(torch.arange(7) - clamped).abs() > 1] == 0)


def test_local_p_is_the_windowed_softmax_times_an_unrenormalised_gaussian():
    attention = make("local-p", window=2)
    query, keys, values, mask, _ = inputs()
    weights = attention(query, keys, values, mask).weights
    centre = attention.aligned_position(query, mask).unsqueeze(-1)
    last = mask.sum(-1, keepdim=True) - 1
    steps = torch.arange(6)
    window = mask & ((steps - torch.minimum(centre, last)).abs() <= 2)
    energies = attention.inner.score(query, attention.inner.prepare_keys(keys))
    softmax = energies.masked_fill(~window, float("-inf")).softmax(-1)
    gaussian = torch.exp(-((steps - centre) ** 2) / (2 * 1.0**2))  # sigma = D / 2 = 1
    torch.testing.assert_close(weights, softmax * gaussian)


def test_location_ignores_keys_and_rejects_long_sources():
    attention = make("location", max_source_len=6)
    query, keys, values, mask, positions = inputs()
    first = attention(query, keys, values, mask).context
    torch.testing.assert_close(attention(query, torch.randn(3, 6, 8), values, mask).context, first)
    long_keys = torch.randn(3, 7, 8)
    with pytest.raises(UserError, match=r"7 positions.*model\.attention\.max_source_len"):
        attention(query, long_keys, long_keys, padding_mask(torch.tensor([7, 3, 1])))


def test_none_gives_the_mean_of_the_real_values():
    query, keys, values, mask, positions = inputs()
    context = make("none")(query, keys, values, mask).context
    for row, length in enumerate((6, 3, 1)):
        expected = values[row, :length].mean(0).expand(2, 8)
        torch.testing.assert_close(context[row], expected)


DATA = {"data": {"src": "de", "tgt": "en", "train": "a", "valid": "b"}}


@pytest.mark.parametrize(
    "attention, fragments",
    [
        ({"type": "local-m", "window": 0}, ["model.attention.window", "greater than 0"]),
        ({"type": "local-p", "score": "magic"}, ["model.attention.score", "'magic'", "concat"]),
        ({"type": "local-p", "score": "location"}, ["allowed: bahdanau, concat, cosine, dot"]),
        ({"type": "general", "heads": 3}, ["heads = 3", "hidden_dim = 16"]),
        ({"type": "general", "head": 2}, ["unknown key 'model.attention.head'", "heads"]),
        (
            {"type": "bahdanau", "window": 5},
            ["bahdanau attention does not read window=5", "its options: heads"],
        ),
        (
            {"type": "local-m", "renormalize": True, "max_source_len": 9},
            ["does not read max_source_len=9, renormalize=True", "options: heads, score, window"],
        ),
    ],
)
def test_bad_attention_options_name_field_value_and_allowed(attention, fragments):
    with pytest.raises(UserError) as error:
        config_from_dict({**DATA, "model": {"hidden_dim": 16, "attention": attention}})
    for fragment in fragments:
        assert fragment in str(error.value)


@pytest.fixture
def registry():
    """The attention registry, restored afterwards: a type registered in a test leaves no trace."""
    before = dict(ATTENTION_TYPES)
    yield ATTENTION_TYPES
    ATTENTION_TYPES.clear()
    ATTENTION_TYPES.update(before)


def test_a_new_type_plugs_in_with_one_class_and_one_decorator(registry):
    @register_attention("test-euclidean")
    class EuclideanAttention(Attention):
        """-||q - k||^2"""

        def score(self, query, keys):
            return -(torch.cdist(query, keys) ** 2)

    assert registry["test-euclidean"] is EuclideanAttention
    src, tgt = torch.randint(4, 20, (2, 5)), torch.randint(4, 20, (2, 3))
    mask = padding_mask(torch.tensor([5, 2]), 5)
    for arch in ("rnn", "transformer"):
        cfg = ModelConfig(
            arch=arch, embed_dim=8, hidden_dim=8, dropout=0.0,
            attention={"type": "test-euclidean"}, self_attention={"type": "test-euclidean"},
        )  # fmt: skip
        model = build_model(cfg, 20, 20, pad_id=0)
        found = [m for m in model.modules() if isinstance(m, EuclideanAttention)]
        # RNN: the decoder's; Transformer: a head score in each self- and cross-attention.
        assert len(found) == (1 if arch == "rnn" else 3)
        assert model(src, mask, tgt).shape == (2, 3, 20)


@pytest.mark.parametrize("name", ["scaled-dot", "multihead", "dot"])
def test_skipping_the_weights_gives_the_same_context(name):
    attention = make(name)
    query, keys, values, mask, positions = inputs()
    with_weights = attention(query, keys, values, mask, positions)
    fused = attention(query, keys, values, mask, positions, need_weights=False)
    torch.testing.assert_close(fused.context, with_weights.context)
    assert with_weights.weights is not None


@pytest.mark.parametrize("name", TYPES)
def test_multi_head_with_one_head_equals_its_base_score(name):
    torch.manual_seed(0)
    registered = attention_class(name)  # multihead is MultiHead over scaled-dot
    wrapper = registered if issubclass(registered, MultiHead) else MultiHead
    multi = wrapper(8, 8, AttentionConfig(type=name, heads=1, **own_options(name)))
    for proj in (multi.query_proj, multi.key_proj, multi.value_proj, multi.out_proj):
        torch.nn.init.eye_(proj.weight)
    query, keys, values, mask, positions = inputs()
    out = multi(query, keys, values, mask, positions)
    base = multi.inner(query, keys, values, mask, positions)  # the score alone, same weights
    assert out.weights.shape == (3, 1, 2, 6)
    torch.testing.assert_close(out.weights[:, 0], base.weights)
    torch.testing.assert_close(out.context, base.context)


def test_options_a_type_does_not_read_are_accepted_at_their_defaults():
    # A run's config.yaml holds every field, so a type's unused options come back at
    # their defaults: they must load.
    cfg = config_from_dict({**DATA, "model": {"attention": {"type": "dot", "window": 10}}})
    assert cfg.model.attention.window == 10
    local = {"type": "local-p", "window": 3, "score": "dot", "renormalize": True}
    assert config_from_dict({**DATA, "model": {"attention": local}}).model.attention.window == 3


@pytest.mark.parametrize(
    "arch, hidden, attention, heads",
    [
        ("rnn", 16, {"type": "general"}, 1),
        ("rnn", 16, {"type": "multihead"}, 4),  # its own default, since 4 divides 16
        ("rnn", 6, {"type": "multihead"}, 1),  # 4 does not divide 6
        ("rnn", 16, {"type": "general", "heads": 2}, 2),
        ("transformer", 16, {"type": "general"}, 4),
        ("transformer", 16, {"type": "dot", "heads": 1}, 1),
    ],
)
def test_the_number_of_heads_follows_one_rule(arch, hidden, attention, heads):
    cfg = ModelConfig(arch=arch, embed_dim=hidden, hidden_dim=hidden, attention=attention)
    assert cfg.heads(cfg.attention) == heads
    model = build_model(cfg, 20, 20, pad_id=0)
    built = model.decoder.attention if arch == "rnn" else model.decoder_layers[0].cross_attention
    assert getattr(built, "heads", 1) == heads
    assert isinstance(built, MultiHead) == (heads > 1 or attention["type"] == "multihead")


def test_importing_the_package_registers_every_module_in_it():
    import pkgutil
    import sys

    import seq2seq.attention as package

    names = [m.name for m in pkgutil.iter_modules(package.__path__)]
    assert {"scores", "local", "multihead"} <= set(names)
    assert all(f"seq2seq.attention.{name}" in sys.modules for name in names)


def test_only_location_limits_the_source_length():
    limits = {
        name: attention_class(name).max_source_positions(AttentionConfig(type=name))
        for name in TYPES
    }
    assert limits.pop("location") == 256
    assert set(limits.values()) == {None}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_attention_is_the_softmax_of_scaled_energies_and_picks_its_kernel(dtype, monkeypatch):
    kernels = []
    real = base.sdpa_kernel
    monkeypatch.setattr(
        base, "sdpa_kernel", lambda backend: kernels.append(backend) or real(backend)
    )
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5 if i else 4, 8) for i in range(3))
    mask = (torch.arange(5) < torch.tensor([5, 3])[:, None])[:, None, None, :]  # (B, 1, 1, S)
    inputs = [x.to(dtype).requires_grad_() for x in (q, k, v)]
    out = base.fused_attention(*inputs, mask)
    out.float().square().sum().backward()
    exact = [x.detach().to(dtype).double().requires_grad_() for x in (q, k, v)]
    energies = exact[0] @ exact[1].transpose(-1, -2) / math.sqrt(8)
    weights = energies.masked_fill(~mask, -math.inf).softmax(-1)
    (weights @ exact[2]).square().sum().backward()
    tolerance = 1e-5 if dtype == torch.float32 else 3e-2  # bf16: the output's rounding
    assert torch.allclose(out.double(), weights @ exact[2], atol=tolerance, rtol=tolerance)
    for fast, slow in zip(inputs, exact, strict=True):
        assert torch.allclose(fast.grad.double(), slow.grad, atol=10 * tolerance, rtol=tolerance)
    # PyTorch's fused CPU kernel has a slow bf16 backward: the math kernel there, only there
    assert kernels == ([] if dtype == torch.float32 else [base.SDPBackend.MATH])
    with torch.no_grad():
        base.fused_attention(*inputs, mask)
    assert len(kernels) == (0 if dtype == torch.float32 else 1)  # inference: the fused one
