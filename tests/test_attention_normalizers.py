"""Normalizers: softmax, sparsemax, entmax15 and learned-alpha entmax in every attention type."""

import json
import math

import pytest
import torch
from cli_helpers import run_cli, train_straight_and_resumed
from test_attention_diagnostics import Harness, batch
from test_cli import parameters

from seq2seq.attention import MultiHead, attention_names, build_attention
from seq2seq.attention.diagnostics import measure_attention
from seq2seq.attention.normalizers import NORMALIZERS, Normalizer, build_normalizer
from seq2seq.config import AttentionConfig, ModelConfig, config_from_dict
from seq2seq.data.padded_batches import padding_mask
from seq2seq.errors import UserError
from seq2seq.export import unexportable
from seq2seq.models import build_model

SPARSE = ["sparsemax", "entmax15", "entmax"]
NAMES = ["softmax", *SPARSE]


def normalize(name, energies, heads=1):
    return build_normalizer(AttentionConfig(normalizer=name, heads=heads))(energies)


def test_the_registry_holds_every_normalizer_and_the_config_lists_it():
    # hard: the softmax its choice draws from (test_hard_attention.py)
    assert list(NORMALIZERS) == [*NAMES, "hard"]
    field = AttentionConfig.model_json_schema()["properties"]["normalizer"]
    assert field["enum"] == sorted(NORMALIZERS)


def test_a_new_normalizer_is_one_registered_class(monkeypatch):
    """Registered, a normalizer is a config value, built into every attention, and its own
    option is refused with the others and read with it."""

    class Halved(Normalizer):
        options = frozenset({"alpha_per_head"})  # borrowed: an option this one alone reads

        def forward(self, energies):
            return torch.softmax(energies / 2, dim=-1)

    monkeypatch.setitem(NORMALIZERS, "halved", Halved)
    attention = build_attention(AttentionConfig(type="dot", normalizer="halved"), 8, 8)
    assert isinstance(attention.normalizer, Halved)
    z = torch.tensor([[[2.0, 0.0]]])
    torch.testing.assert_close(attention.normalizer(z), torch.softmax(z / 2, dim=-1))
    AttentionConfig(normalizer="halved", alpha_per_head=False)
    with pytest.raises(ValueError, match="alpha_per_head is read by normalizer entmax or halved"):
        AttentionConfig(normalizer="softmax", alpha_per_head=False)


def test_sparsemax_and_entmax15_by_hand():
    # sparsemax of (1, 0.5, -1): support {1, 2}, tau = (1.5 - 1) / 2 = 0.25.
    z = torch.tensor([[[1.0, 0.5, -1.0]]])
    torch.testing.assert_close(normalize("sparsemax", z), torch.tensor([[[0.75, 0.25, 0.0]]]))
    # entmax15: w = [z/2 - tau]_+^2; on support {1, 2}, (0.5 - tau)^2 + (0.25 - tau)^2 = 1,
    # 2 tau^2 - 1.5 tau - 0.6875 = 0, tau = (1.5 - sqrt(7.75)) / 4; -0.5 < tau: key 3 is 0.
    tau = (1.5 - math.sqrt(7.75)) / 4
    expected = torch.tensor([[[(0.5 - tau) ** 2, (0.25 - tau) ** 2, 0.0]]])
    torch.testing.assert_close(normalize("entmax15", z), expected)
    # Learned entmax starts at alpha = 1.5: entmax15, by bisection.
    torch.testing.assert_close(normalize("entmax", z), expected, atol=1e-5, rtol=0)
    # Softmax never gives a real key exactly 0.
    assert torch.all(normalize("softmax", z) > 0)


@pytest.mark.parametrize("name", NAMES)
def test_masked_keys_get_exactly_zero_and_change_nothing_else(name):
    z = torch.tensor([[[1.0, 0.5, -1.0, 9.0]]])
    masked = normalize(name, z.masked_fill(torch.tensor([False, False, False, True]), -math.inf))
    alone = normalize(name, z[..., :3])
    assert masked[0, 0, 3] == 0
    torch.testing.assert_close(masked[..., :3], alone)
    torch.testing.assert_close(masked.sum(-1), torch.ones(1, 1))
    one_key = z.masked_fill(torch.tensor([False, True, True, True]), -math.inf)
    assert normalize(name, one_key)[0, 0, 0] == 1  # a single allowed key takes everything


@pytest.mark.parametrize("name", SPARSE)
def test_gradients_match_finite_differences_in_float64(name):
    torch.manual_seed(0)
    # Entries far apart: no ties and no key on the support's edge, where w is not smooth.
    z = (torch.randperm(12).double() / 3).view(2, 1, 6).requires_grad_()
    mask = torch.tensor([True, True, True, True, False, True])
    normalizer = build_normalizer(AttentionConfig(normalizer=name, heads=2)).double()

    def weights(energies, *params):
        return normalizer(energies.masked_fill(~mask, -math.inf))

    params = list(normalizer.parameters())
    assert torch.autograd.gradcheck(weights, (z, *params), eps=1e-6, atol=1e-5)


def test_learned_alpha_is_one_per_head_and_stays_between_one_and_two():
    normalizer = build_normalizer(AttentionConfig(normalizer="entmax", heads=2))
    with torch.no_grad():
        normalizer.alpha_logit.copy_(torch.tensor([0.0, 40.0]))  # alpha 1.5 and ~2
    z = torch.tensor([1.0, 0.5, -1.0]).expand(4, 1, 3)  # rows b * H + h: heads 0, 1, 0, 1
    w = normalizer(z)
    torch.testing.assert_close(w[0], w[2])
    torch.testing.assert_close(w[0], normalize("entmax15", z[:1])[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(w[1], normalize("sparsemax", z[:1])[0], atol=1e-5, rtol=0)
    shared = build_normalizer(AttentionConfig(normalizer="entmax", heads=2, alpha_per_head=False))
    assert shared.alpha().shape == (1,) and normalizer.alpha().shape == (2,)
    with torch.no_grad():
        normalizer.alpha_logit.copy_(torch.tensor([-1e3, 1e3]))
    assert torch.all(normalizer.alpha() >= 1) and torch.all(normalizer.alpha() <= 2)


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("name", SPARSE)
@pytest.mark.parametrize("kind", [k for k in attention_names() if k != "none"])  # no weights
def test_every_type_masks_sums_to_one_and_skips_no_weights(kind, name, heads):
    options = {"window": 2} if kind.startswith("local") else {}
    cfg = AttentionConfig(type=kind, normalizer=name, **options)
    torch.manual_seed(0)
    attention = build_attention(cfg, 8, 8, heads)
    query, keys, values = 3 * torch.randn(3, 2, 8), 3 * torch.randn(3, 6, 8), torch.randn(3, 6, 8)
    mask, positions = padding_mask(torch.tensor([6, 3, 1]), 6), torch.tensor([[0, 1]] * 3)
    out = attention(query, keys, values, mask, positions)
    assert torch.all(out.weights[1, ..., 3:] == 0) and torch.all(out.weights[2, ..., 1:] == 0)
    sums = out.weights.sum(-1)
    if kind == "local-p":  # a Gaussian times the window's weights, as with softmax
        assert torch.all(sums <= 1 + 1e-6)
    else:
        torch.testing.assert_close(sums, torch.ones_like(sums))
    skipped = attention(query, keys, values, mask, positions, need_weights=False)
    assert skipped.weights is None or torch.equal(skipped.weights, out.weights)
    torch.testing.assert_close(skipped.context, out.context)


@pytest.mark.parametrize("name", SPARSE)
def test_the_fused_kernel_is_left_for_softmax_only(name, monkeypatch):
    from seq2seq.attention import multihead, scores

    def refuse(*args, **kwargs):
        raise AssertionError("the fused kernel computes softmax")

    monkeypatch.setattr(scores, "fused_attention", refuse)
    monkeypatch.setattr(multihead, "fused_attention", refuse)
    for kind, heads in [("scaled-dot", 1), ("multihead", 4)]:
        attention = build_attention(AttentionConfig(type=kind, normalizer=name), 8, 8, heads)
        mask = padding_mask(torch.tensor([4]), 4)
        attention(torch.randn(1, 2, 8), torch.randn(1, 4, 8), torch.randn(1, 4, 8), mask,
                  need_weights=False)  # fmt: skip
        assert not attention.is_multi_head_scaled_dot


@pytest.mark.parametrize("name", SPARSE)
def test_weights_are_float32_under_bf16_autocast(name):
    attention = build_attention(AttentionConfig(type="general", normalizer=name), 8, 8, 2)
    mask = padding_mask(torch.tensor([5, 2]), 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attention(torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8), mask)
    assert out.weights.dtype == torch.float32 and out.context.dtype == torch.bfloat16
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(2, 2, 3), atol=1e-6, rtol=0)
    assert torch.all(out.weights[1, ..., 2:] == 0)


def test_diagnostics_count_the_support_and_report_alpha_per_head():
    # One query whose energies (1, 0.5, -1) have a sparsemax support of 2 of 3 keys.
    query = torch.tensor([[[1.0, 0.5, -1.0]]])
    keys = torch.eye(3).unsqueeze(0)
    found = measure_attention(
        Harness(build_attention(AttentionConfig(type="dot", normalizer="sparsemax"), 3, 3),
                query, keys), [batch([3], [2])]
    )["decoder.attention"]["mean"]  # fmt: skip
    assert found["support"] == 2 and found["zeros"] == pytest.approx(1 / 3)
    attention = build_attention(AttentionConfig(type="multihead", normalizer="entmax"), 8, 8, 2)
    with torch.no_grad():
        attention.inner.normalizer.alpha_logit.copy_(torch.tensor([0.0, math.log(3)]))
    keys = torch.randn(1, 4, 8)
    entry = measure_attention(Harness(attention, torch.randn(1, 3, 8), keys), [batch([4], [3])])
    site = entry["decoder.attention"]
    assert site["per_head"]["alpha"] == [1.5, 1.75] and site["mean"]["alpha"] == 1.625
    softmax = build_attention(AttentionConfig(type="dot"), 3, 3)
    plain = measure_attention(Harness(softmax, query, torch.eye(3)[None]), [batch([3], [2])])
    assert "support" not in plain["decoder.attention"]["mean"]


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
@pytest.mark.parametrize("name", NAMES)
def test_every_normalizer_learns_to_reverse_in_both_architectures(arch, name):
    """Reversal needs attention: the loss must fall far, with sparse weights in every site."""
    torch.manual_seed(0)
    section = {"type": "general", "normalizer": name}
    cfg = ModelConfig(
        arch=arch, embed_dim=32, hidden_dim=32, ff_dim=64, dropout=0.0,
        attention=section, self_attention=section | {"type": "scaled-dot"},
    )  # fmt: skip
    model = build_model(cfg, 12, 12, pad_id=0)
    src = torch.cat([torch.randint(4, 12, (16, 5)), torch.full((16, 1), 3)], dim=1)
    tgt = torch.cat([src[:, :-1].flip(1), src[:, -1:]], dim=1)
    tgt_in = torch.cat([torch.full((16, 1), 2), tgt[:, :-1]], dim=1)
    mask = padding_mask(torch.full((16,), 6))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(50):
        logits = model(src, mask, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]
    if name == "entmax":  # alpha learned: it moved from 1.5
        alphas = [p for n, p in model.named_parameters() if n.endswith("alpha_logit")]
        assert alphas and all(torch.all(p != 0) for p in alphas)


def test_the_transformer_is_captured_unless_a_normalizer_reads_the_host():
    def model(name):
        cfg = ModelConfig(arch="transformer", embed_dim=8, hidden_dim=8, ff_dim=8,
                          self_attention={"normalizer": name})  # fmt: skip
        return build_model(cfg, 10, 10, 0)

    assert model("softmax").graph_capturable and model("entmax15").graph_capturable
    assert not model("sparsemax").graph_capturable


DATA = {"src": "de", "tgt": "en", "train": "t", "valid": "v"}


@pytest.mark.parametrize("section", ["attention", "self_attention"])
def test_export_refuses_a_normalizer_other_than_softmax_in_one_line(section):
    model = {"arch": "transformer", "embed_dim": 8, "hidden_dim": 8}
    model |= {"attention": {"type": "multihead"}, section: {"type": "multihead",
                                                            "normalizer": "entmax15"}}  # fmt: skip
    problem = unexportable(config_from_dict({"data": DATA, "model": model}))
    assert problem == (
        f"model.{section}.normalizer is entmax15; CTranslate2 computes softmax attention "
        "only: translate with the PyTorch engine instead"
    )


@pytest.mark.parametrize(
    "attention, fragment",
    [
        ({"normalizer": "tsallis"}, "'tsallis' is none of the normalizers: entmax, entmax15, hard"),
        ({"alpha_per_head": False}, "alpha_per_head is read by normalizer entmax only"),
    ],
)
def test_bad_normalizer_options_are_refused(attention, fragment):
    with pytest.raises(UserError, match=fragment):
        config_from_dict({"data": DATA, "model": {"attention": attention}})


def test_a_multi_head_site_normalizes_once_per_head_in_its_inner_score():
    attention = build_attention(AttentionConfig(type="general", normalizer="entmax"), 8, 8, 4)
    assert isinstance(attention, MultiHead) and attention.normalizer is None
    names = [n for n, _ in attention.named_parameters() if "alpha" in n]
    assert names == ["inner.normalizer.alpha_logit"]
    assert attention.inner.normalizer.alpha().shape == (4,)


def steps_of_a_decode_equal_teacher_forcing(model) -> list[torch.Tensor]:
    """Decoding 3 padded sources step by step, and in beams of 2, gives the teacher-forced
    log-probabilities at every step (checked); -> each step's attention weights."""
    torch.manual_seed(0)
    src = torch.randint(4, 30, (3, 6)).masked_fill(
        ~padding_mask(torch.tensor([6, 4, 2]), 6)[:, 0], 0
    )
    mask, tgt = padding_mask(torch.tensor([6, 4, 2]), 6), torch.randint(4, 30, (3, 5))
    weights = []
    with torch.no_grad():
        full = model(src, mask, tgt).log_softmax(-1)
        memory = model.encode(src, mask)
        state, beams = model.init_state(memory), model.init_state(memory.widened(2))
        for t in range(tgt.size(1)):
            step = model.decode_step(memory, state, tgt[:, t])
            wide = model.decode_step(memory.widened(2), beams, tgt[:, t].repeat_interleave(2))
            state, beams = step.state, wide.state
            torch.testing.assert_close(step.log_probs, full[:, t], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(wide.log_probs[::2], full[:, t], atol=1e-5, rtol=1e-5)
            weights.append(step.attention)
    return weights


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
@pytest.mark.parametrize("name", SPARSE)
def test_decoding_step_by_step_and_in_beams_equals_teacher_forcing(arch, name):
    section = {"type": "general", "normalizer": name}
    cfg = ModelConfig(
        arch=arch, embed_dim=16, hidden_dim=16, ff_dim=32, dropout=0.0,
        attention=section, self_attention=section | {"type": "scaled-dot"},
    )  # fmt: skip
    torch.manual_seed(0)
    model = build_model(cfg, 30, 40, pad_id=0).eval()
    for weights in steps_of_a_decode_equal_teacher_forcing(model):
        assert torch.all(weights[2, ..., 2:] == 0)


# entmax: exact zeros, and a learned alpha that a resumed run must restore (sparsemax has
# no state to restore; it learns in both architectures in test_every_normalizer_learns_...).
@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_a_sparse_run_resumes_exactly_translates_and_is_inspected(toy, tmp_path, capsys, arch):
    sets = [f"model.arch={arch}", "model.ff_dim=32", "model.attention.normalizer=entmax",
            "model.attention.type=general"]  # fmt: skip
    if arch == "transformer":
        sets.append("model.self_attention.normalizer=entmax")
    straight, resumed = train_straight_and_resumed(toy, tmp_path, *sets, steps=4, stop=2)
    a, b = parameters(straight), parameters(resumed)
    assert any("alpha_logit" in k for k in a)
    assert all(torch.equal(a[k], b[k]) for k in a)

    source = tmp_path / "in.txt"
    source.write_text("boka mimi\ntoto tape podo\n")
    out, picture = tmp_path / "out.txt", tmp_path / "map.png"
    assert run_cli("translate", "--run", straight, "--input", source, "--output", out) == 0
    assert out.read_text().count("\n") == 2
    assert run_cli("plot-attention", "--run", straight, "--src", "toto tape", "-o", picture) == 0
    capsys.readouterr()
    ref = toy / "data/test.tgt"
    assert run_cli("inspect", "--run", straight, "--src", toy / "data/test.src", "--ref", ref,
                   "--json") == 0  # fmt: skip
    sites = json.loads(capsys.readouterr().out)["sites"]
    assert all(0 < site["mean"]["zeros"] < 1 for site in sites.values())
    assert all("alpha" in site["mean"] for site in sites.values())
