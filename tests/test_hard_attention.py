"""Hard attention: positions chosen from the attention's distribution, the exact marginal,
REINFORCE and straight-through Gumbel-softmax, in both architectures."""

import json
import math

import pytest
import torch
from cli_helpers import run_cli, train_straight_and_resumed
from test_attention_diagnostics import batch
from test_attention_normalizers import steps_of_a_decode_equal_teacher_forcing
from test_cli import parameters
from torch import nn

from seq2seq.attention.diagnostics import SIGNAL_SEED, measure_attention
from seq2seq.attention.hard import ChoiceLoss, PositionChoice, entropy, one_hot
from seq2seq.config import HardAttentionConfig, ModelConfig, config_from_dict
from seq2seq.data.padded_batches import padding_mask
from seq2seq.data.tokenizer import PAD_ID
from seq2seq.errors import UserError
from seq2seq.export import unexportable
from seq2seq.models import build_model, marginal
from seq2seq.train.loss import token_cross_entropy

DATA = {"src": "de", "tgt": "en", "train": "t", "valid": "v"}


def choice(**hard) -> PositionChoice:
    return PositionChoice(HardAttentionConfig(**hard))


def hard_model(arch="rnn", dim=8, vocab=13, **hard):
    section = {"type": "general", "normalizer": "hard", "hard": hard}
    cfg = ModelConfig(arch=arch, embed_dim=dim, hidden_dim=dim, ff_dim=2 * dim, dropout=0.0,
                      attention=section)  # fmt: skip
    return build_model(cfg, vocab, vocab, pad_id=PAD_ID)


def test_evaluation_reads_the_argmax_the_k_best_renormalised_or_p_and_never_draws():
    p = torch.tensor([[[0.1, 0.5, 0.0, 0.4]]])
    before = torch.get_rng_state()
    assert torch.equal(choice(estimator="reinforce").eval()(p), torch.tensor([[[0, 1.0, 0, 0]]]))
    two = choice(estimator="gumbel", inference="k").eval()(p)
    torch.testing.assert_close(two, torch.tensor([[[0, 5 / 9, 0, 4 / 9]]]))
    assert torch.equal(choice(estimator="gumbel", inference="k", k=9).eval()(p), p)  # 0 stays
    exact = choice(estimator="exact", inference="exact")
    assert exact.eval().sums and torch.equal(exact(p), p)
    assert torch.equal(torch.get_rng_state(), before)


def test_training_draws_each_position_as_often_as_p_and_gumbel_passes_the_relaxed_gradient():
    torch.manual_seed(0)
    draws, p = 20_000, torch.tensor([0.1, 0.5, 0.0, 0.4])
    chosen = choice(estimator="reinforce")(p.expand(draws, 1, 4))
    assert torch.all(chosen.sum(-1) == 1) and torch.all(chosen[..., 2] == 0)
    error = (chosen.mean((0, 1)) - p).abs()
    assert torch.all(error <= 4 * (p * (1 - p) / draws).sqrt() + 1e-9)

    energies = torch.randn(3, 2, 5, requires_grad=True)
    gumbel, weigh = choice(estimator="gumbel", temperature=0.5), torch.randn(5)
    torch.manual_seed(1)
    weights = gumbel(energies.softmax(-1))
    assert torch.equal(weights, one_hot(weights.argmax(-1), weights))  # one position forward
    (straight,) = torch.autograd.grad((weights * weigh).sum(), energies)
    torch.manual_seed(1)  # the same noise, g = -log(-log u), through the relaxed softmax
    noise = -(-torch.rand(3, 2, 5).log()).log()
    relaxed = torch.softmax((energies.log_softmax(-1) + noise) / 0.5, dim=-1)
    (expected,) = torch.autograd.grad((relaxed * weigh).sum(), energies)
    torch.testing.assert_close(straight, expected)


@pytest.mark.parametrize("baseline", ["soft", "moving-average"])
def test_reinforce_estimates_the_gradient_of_the_expected_reward_without_bias(baseline):
    """Reward f(j) = log p(y | j), j ~ p = softmax(e): d E[f] / d e_k = p_k (f_k - E f).
    The mean of many single-draw estimates is within 4 standard errors of it, whatever
    the baseline (one that does not depend on the draw)."""
    torch.manual_seed(0)
    draws, e = 40_000, torch.tensor([0.5, -1.0, 1.5, 0.0])
    table = torch.log_softmax(2 * torch.randn(4, 6), dim=-1)  # log p(y | j), a row per j
    targets = torch.full((draws, 1), 5)
    cfg = HardAttentionConfig(estimator="reinforce", baseline=baseline)
    pick, terms = PositionChoice(cfg), ChoiceLoss(cfg, reaches_later=False)
    if baseline == "moving-average":
        terms.average.fill_(-0.3), terms.weight.fill_(0.5)  # m = -0.6
    energies = e.repeat(draws, 1, 1).requires_grad_()  # a leaf per draw: its own estimate
    p = energies.softmax(-1)
    logits = pick(p) @ table  # log_softmax of a row of `table` is that row: r = f(j)
    loss = terms([pick], logits, p.detach() @ table, targets)
    assert loss.item() == 0
    loss.backward()
    estimates = -energies.grad[:, 0]
    f, q = table[:, 5], e.softmax(-1)
    exact = q * (f - (q * f).sum())
    error = estimates.mean(0) - exact
    assert torch.all(error.abs() < 4 * estimates.std(0) / math.sqrt(draws))
    assert torch.all(estimates.std(0) > 0)
    if baseline == "moving-average":  # it took in this batch's mean reward
        mean = (q * f).sum()
        expected = (0.99 * -0.3 + 0.01 * mean) / (0.99 * 0.5 + 0.01)
        assert (terms.average / terms.weight).item() == pytest.approx(expected.item(), rel=0.02)


def test_the_entropy_bonus_adds_its_gradient_and_nothing_to_the_loss():
    energies = torch.randn(2, 3, 5, requires_grad=True)
    cfg = HardAttentionConfig(estimator="gumbel", entropy_bonus=0.3)
    pick = PositionChoice(cfg)
    pick(energies.softmax(-1))
    targets = torch.tensor([[4, 5, PAD_ID], [4, PAD_ID, PAD_ID]])
    loss = ChoiceLoss(cfg, reaches_later=True)([pick], torch.zeros(2, 3, 7), None, targets)
    assert loss.item() == 0 and pick.last is None  # taken
    (found,) = torch.autograd.grad(loss, energies)
    real = targets != PAD_ID
    bonus = -0.3 * (entropy(energies.softmax(-1)) * real).sum()
    torch.testing.assert_close(found, torch.autograd.grad(bonus, energies)[0])


class Fixed(nn.Module):
    """A stand-in choice of one position j for every query (or p itself, j None)."""

    sums = False

    def __init__(self, j):
        super().__init__()
        self.j = j

    def forward(self, p):
        self.p = p
        return p if self.j is None else one_hot(torch.full(p.shape[:-1], self.j), p)


def test_the_exact_marginal_is_the_sum_over_positions_of_p_times_their_predictions(monkeypatch):
    torch.manual_seed(0)
    model = hard_model(arch="rnn", estimator="exact")
    lengths = torch.tensor([5, 3, 1])
    mask = padding_mask(lengths, 5)
    src = torch.randint(4, 13, (3, 5)).masked_fill(~mask[:, 0], PAD_ID)
    tgt_in, tgt_out = torch.randint(4, 13, (3, 4)), torch.randint(4, 13, (3, 4))
    monkeypatch.setattr(marginal, "CHUNK_ELEMENTS", 1)  # one step a chunk, recomputed
    exact = model(src, mask, tgt_in)
    torch.testing.assert_close(exact.logsumexp(-1), torch.zeros(3, 4), atol=1e-5, rtol=0)
    # By brute force: the model's prediction with the context at each position j in turn.
    choice = model.decoder.choice
    model.decoder.choice = keep = Fixed(None)
    model(src, mask, tgt_in)
    mixed = 0
    for j in range(5):
        model.decoder.choice = Fixed(j)
        mixed = mixed + keep.p[..., j, None] * model(src, mask, tgt_in).softmax(-1)
    torch.testing.assert_close(exact, mixed.log(), atol=1e-5, rtol=1e-5)
    params = [p for p in model.parameters() if p.requires_grad]
    found = torch.autograd.grad(token_cross_entropy(exact, tgt_out), params, allow_unused=True)
    brute = torch.autograd.grad(
        token_cross_entropy(mixed.log(), tgt_out), params, allow_unused=True
    )
    for a, b in zip(found, brute, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    model.decoder.choice = choice


@pytest.mark.parametrize(
    "arch, hard",
    [
        ("rnn", {"estimator": "exact"}),
        ("rnn", {"estimator": "reinforce"}),
        ("rnn", {"estimator": "gumbel"}),
        ("transformer", {"estimator": "reinforce", "baseline": "moving-average"}),
        ("transformer", {"estimator": "gumbel", "entropy_bonus": 0.01}),
    ],
)
def test_every_estimator_learns_to_reverse_and_evaluates_with_its_argmax(arch, hard):
    """Reversal needs attention: the loss of the argmax positions must fall far."""
    torch.manual_seed(0)
    model = hard_model(arch=arch, dim=16, vocab=12, **hard)
    src = torch.cat([torch.randint(4, 12, (16, 5)), torch.full((16, 1), 3)], dim=1)
    tgt = torch.cat([src[:, :-1].flip(1), src[:, -1:]], dim=1)
    tgt_in = torch.cat([torch.full((16, 1), 2), tgt[:, :-1]], dim=1)
    mask = padding_mask(torch.full((16,), 6))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)

    def evaluated():
        with torch.no_grad():
            return token_cross_entropy(model.eval()(src, mask, tgt_in), tgt).item()

    before = evaluated()
    model.train()
    for _ in range(40):
        logits = model(src, mask, tgt_in)
        loss = token_cross_entropy(logits, tgt)
        auxiliary = model.auxiliary_loss(logits, tgt)
        optimizer.zero_grad()
        (loss if auxiliary is None else loss + auxiliary).backward()
        optimizer.step()
    assert evaluated() < 0.4 * before


def test_the_logits_reach_what_only_the_auxiliary_loss_trains_so_that_ddp_waits_for_it():
    torch.manual_seed(0)
    model = hard_model(arch="transformer", estimator="reinforce")
    mask = padding_mask(torch.tensor([4, 2]), 4)
    logits = model(torch.randint(4, 13, (2, 4)), mask, torch.randint(4, 13, (2, 3)))
    weight = model.decoder_layers[0].cross_attention.query_proj.weight
    (found,) = torch.autograd.grad(logits.sum(), weight, allow_unused=True)
    assert found is not None and torch.all(found == 0)  # reached, by 0 times the records


@pytest.mark.parametrize(
    "arch, hard",
    [
        ("rnn", {"inference": "exact"}),
        ("rnn", {"inference": "k", "k": 2}),
        ("transformer", {"estimator": "reinforce"}),
        ("transformer", {"inference": "k", "k": 3}),
    ],
)
def test_decoding_step_by_step_and_in_beams_equals_teacher_forcing(arch, hard):
    torch.manual_seed(0)
    model = hard_model(arch=arch, dim=16, vocab=40, **hard).eval()
    for weights in steps_of_a_decode_equal_teacher_forcing(model):
        assert torch.all(weights[2, ..., 2:] == 0)  # one position, or a few, of the real ones
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights[..., 0]))


def test_diagnostics_read_the_distribution_and_the_variance_of_the_learning_signal():
    torch.manual_seed(0)
    model = hard_model(arch="rnn", estimator="reinforce", baseline="moving-average")
    model.choice_loss.average.fill_(-1.0), model.choice_loss.weight.fill_(1.0)
    pairs = batch([6, 4], [5, 3])
    pairs.src[:, :3], pairs.tgt_out[:, :2] = torch.randint(4, 13, (2, 3)), 7
    before = torch.get_rng_state()
    found = measure_attention(model, [pairs])["decoder.attention"]["mean"]
    assert torch.equal(torch.get_rng_state(), before)  # it drew from its own generator
    # The RNN's recurrence reads the expected context: its distribution is the soft
    # attention's of the same weights, not the one-hot choice's (entropy 0).
    soft = build_model(ModelConfig(embed_dim=8, hidden_dim=8, dropout=0.0,
                                   attention={"type": "general"}), 13, 13, PAD_ID)  # fmt: skip
    soft.load_state_dict(model.state_dict(), strict=False)
    plain = measure_attention(soft, [pairs])["decoder.attention"]["mean"]
    assert found["entropy"] == plain["entropy"] > 0.1 and "reinforce_var" not in plain
    signal = model.eval().learning_signal(
        pairs.src, pairs.src_mask, pairs.tgt_in, pairs.tgt_out,
        torch.Generator().manual_seed(SIGNAL_SEED),
    )  # fmt: skip
    expected = signal[pairs.tgt_out != PAD_ID].var(unbiased=False).item()
    assert found["reinforce_var"] == pytest.approx(expected, rel=1e-4) and expected > 0


@pytest.mark.parametrize(
    "model, fragment",
    [
        ({"arch": "transformer", "attention": {"normalizer": "hard", "hard": {
            "estimator": "exact"}}}, "estimator exact sums over the positions, which only the "
         "RNN can (its next steps read the expected context); in the transformer set "
         "estimator reinforce or gumbel"),
        ({"arch": "transformer", "attention": {"normalizer": "hard", "hard": {
            "inference": "exact"}}}, "set inference argmax or k"),
        ({"arch": "transformer", "self_attention": {"normalizer": "hard"}},
         "self_attention.normalizer: hard is not supported"),
        ({"attention": {"type": "multihead", "normalizer": "hard"}},
         "heads = 4: the RNN's hard attention chooses a position of one head; set "
         "model.attention.heads: 1"),
        ({"attention": {"normalizer": "hard", "hard": {"temperature": 2}}},
         "temperature is read by estimator gumbel only"),
        ({"attention": {"normalizer": "hard", "hard": {"estimator": "reinforce", "decay": 0.5}}},
         "decay is read by baseline moving-average only"),
        ({"attention": {"hard": {"estimator": "gumbel"}}}, "hard is read by normalizer hard only"),
    ],
)  # fmt: skip
def test_what_cannot_be_computed_is_refused_in_one_line(model, fragment):
    with pytest.raises(UserError, match=None) as error:
        config_from_dict({"data": DATA, "model": model})
    assert fragment in str(error.value) and "\n" not in str(error.value)


def test_the_estimator_defaults_to_exact_in_the_rnn_and_gumbel_in_the_transformer():
    section = {"normalizer": "hard"}
    assert ModelConfig(attention=section).attention.hard.estimator == "exact"
    shared = ModelConfig(arch="transformer", attention=section).attention
    assert shared.hard.estimator == "gumbel"
    cfg = config_from_dict({"data": DATA, "model": {"arch": "transformer", "attention": section}})
    assert unexportable(cfg) == (
        "model.attention.normalizer is hard; CTranslate2 computes softmax attention only: "
        "translate with the PyTorch engine instead"
    )


@pytest.mark.parametrize(
    "arch, sets",
    [
        ("rnn", ["estimator=reinforce", "baseline=moving-average"]),
        ("transformer", ["estimator=reinforce"]),
    ],
)
def test_a_hard_run_resumes_exactly_translates_and_is_inspected(toy, tmp_path, capsys, arch, sets):
    hard = [f"model.attention.hard.{option}" for option in sets]
    sets = [f"model.arch={arch}", "model.ff_dim=32", "model.attention.type=general",
            "model.attention.normalizer=hard", *hard]  # fmt: skip
    straight, resumed = train_straight_and_resumed(toy, tmp_path, *sets, steps=4, stop=2)
    a, b = parameters(straight), parameters(resumed)
    assert ("choice_loss.average" in a) == (arch == "rnn")  # the moving average, kept
    assert all(torch.equal(a[k], b[k]) for k in a)
    summary = json.loads((straight / "summary.json").read_text())
    sites = summary["validations"][-1]["attention"]
    assert all(("reinforce_var" in s["mean"]) == (s["keys"] == "source" and s["queries"] ==
               "target") for s in sites.values())  # fmt: skip
    if arch == "transformer":
        return
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("boka mimi\ntoto tape podo\n")
    assert run_cli("translate", "--run", straight, "--input", source, "--output", out) == 0
    assert out.read_text().count("\n") == 2
    capsys.readouterr()
    ref = toy / "data/test.tgt"
    assert run_cli("inspect", "--run", straight, "--src", toy / "data/test.src", "--ref", ref) == 0
    assert "A var" in capsys.readouterr().out
