"""Positions in the self-attention (`model.positions: alibi`, `relative`, `rotary`): the
slopes, buckets, biases and rotations by hand, the fused kernels equal to the weights'
path, the Transformer's cache and batching with them, and what is refused."""

from __future__ import annotations

import pytest
import torch
from cli_helpers import run_cli, train_straight_and_resumed
from test_cli import parameters
from test_models import batch, steps_checked_against_teacher_forcing, tiny

from seq2seq.attention import build_attention
from seq2seq.attention.positions import (
    DistanceBias,
    Positions,
    RelativeBias,
    Rotation,
    alibi_slopes,
    relative_buckets,
)
from seq2seq.config import POSITION_TYPES, AttentionConfig, ModelConfig, config_from_dict
from seq2seq.decode.search.beams import SearchSettings
from seq2seq.decode.search.loop import output_limits, search
from seq2seq.decode.search.strategy import BeamSearch
from seq2seq.export import unexportable
from seq2seq.models import build_model


def test_the_slopes_of_the_paper() -> None:
    assert alibi_slopes(8) == [2.0**-k for k in range(1, 9)]
    assert alibi_slopes(4) == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]
    # Not a power of 2: the 4 of 4 heads, then every other one of 8 heads'.
    assert alibi_slopes(6) == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    assert alibi_slopes(1) == [2.0**-8]


def test_the_bias_of_each_head_is_minus_its_slope_times_the_distance() -> None:
    bias = DistanceBias(heads=2)
    positions = torch.tensor([[0, 2], [5, 1]]).repeat_interleave(2, dim=0)  # rows b * 2 + h
    found = bias(positions, keys=4)
    for row in range(4):
        slope = alibi_slopes(2)[row % 2]
        for i in range(2):
            for j in range(4):
                expected = -slope * abs(int(positions[row, i]) - j)
                assert found[row, i, j].item() == pytest.approx(expected)


def test_a_rotation_keeps_norms_and_makes_dot_products_relative() -> None:
    rotate = Rotation(8)
    q, k = torch.randn(3, 8), torch.randn(3, 8)
    at = torch.tensor([0, 5, 9])
    assert torch.equal(rotate(q, torch.zeros(3)), q)  # position 0: as it is
    torch.testing.assert_close(rotate(q, at).norm(dim=-1), q.norm(dim=-1))
    i, j = torch.tensor([2, 7, 11]), torch.tensor([4, 1, 11])
    products = (rotate(q, i) * rotate(k, j)).sum(-1)
    shifted = (rotate(q, i + 13) * rotate(k, j + 13)).sum(-1)
    torch.testing.assert_close(shifted, products)  # j - i alone counts
    assert not torch.allclose(products, (q * k).sum(-1))


POSITIONS_OF = {
    "alibi": lambda scorer, heads: setattr(scorer, "position_bias", DistanceBias(heads)),
    "rotary": lambda scorer, heads: setattr(scorer, "position_rotation", Rotation(16 // heads)),
}


@pytest.mark.parametrize("positions", ["alibi", "rotary"])
@pytest.mark.parametrize("name, heads", [("scaled-dot", 1), ("scaled-dot", 4), ("multihead", 4)])
def test_the_fused_kernels_take_positions_as_the_weights_path_does(name, heads, positions) -> None:
    torch.manual_seed(0)
    attention = build_attention(AttentionConfig(type=name), 16, 16, heads=heads).eval()
    scorer = attention.inner if heads > 1 else attention
    POSITIONS_OF[positions](scorer, heads)
    query, keys = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    mask = torch.ones(2, 5, 5, dtype=torch.bool).tril()  # causal, as in the decoder
    mask[1, :, 3:] = False
    positions = torch.arange(5).expand(2, 5)
    slow = attention(query, keys, keys, mask, positions, need_weights=True)
    fast = attention(query, keys, keys, mask, positions, need_weights=False)
    assert fast.weights is None
    torch.testing.assert_close(fast.context, slow.context, atol=1e-5, rtol=1e-5)
    scorer.position_bias = scorer.position_rotation = None  # and the positions do count
    assert not torch.allclose(attention(query, keys, keys, mask, positions).context, slow.context)


def test_t5_buckets_by_hand() -> None:
    relative = torch.tensor([0, 1, -1, -7, -8, -15, -16, -127, -128, -1000, 3, 500])
    both = relative_buckets(relative, True, 32, 128).tolist()
    # Both directions: 16 buckets each, the future's after the past's; exact below 8.
    assert both[:5] == [0, 17, 1, 7, 8] and both[9] == 15 and both[11] == 31
    assert both[5] == 8 + int(8 * torch.log(torch.tensor(15 / 8)) / torch.log(torch.tensor(16.0)))
    past = relative_buckets(relative, False, 32, 128).tolist()
    # The past only: 32 buckets, exact below 16; the future falls into bucket 0.
    assert past[:5] == [0, 0, 1, 7, 8] and past[6] == 16 and past[9] == 31 and past[10] == 0


def test_t5_bias_reads_the_table_of_each_head() -> None:
    bias = RelativeBias(heads=2, bidirectional=True)
    torch.nn.init.normal_(bias.table.weight)
    positions = torch.tensor([[0, 3], [2, 1]]).repeat_interleave(2, dim=0)  # rows b * 2 + h
    found = bias(positions, keys=4)
    for row in range(4):
        for i in range(2):
            for j in range(4):
                bucket = relative_buckets(torch.tensor(j) - positions[row, i], True, 32, 128)
                assert found[row, i, j] == bias.table.weight[bucket, row % 2]


def learned_tables(model) -> list[torch.Tensor]:
    """T5's tables of `model` (shared ones once), drawn at random: a learned bias, not the
    zeros a table starts from."""
    tables = [w for name, w in model.named_parameters() if "table" in name]
    for weights in tables:
        torch.nn.init.normal_(weights)
    return tables


def test_a_learned_relative_bias_decodes_by_cache_as_teacher_forced() -> None:
    # (ALiBi's: test_models.py's variant transformer-alibi, for every attention type.)
    model = tiny("transformer", "bahdanau", positions="relative")
    assert not model.src_embed.add_positions
    assert len(learned_tables(model)) == 2  # one per stack, shared by its layers
    steps_checked_against_teacher_forcing(model)


@pytest.mark.parametrize("positions", ["alibi", "relative"])
def test_a_sentence_decodes_alone_as_in_a_padded_batch(positions) -> None:
    model = tiny("transformer", "bahdanau", positions=positions)
    learned_tables(model)
    src, mask, _ = batch()
    lengths = mask[:, 0].sum(-1)
    limits = output_limits(lengths, 2.0, 2)
    together = search(model, src, mask, limits, BeamSearch(3), SearchSettings(nbest=3, alpha=1.0))
    for row, length in enumerate(lengths.tolist()):
        one = (src[row : row + 1, :length], mask[row : row + 1, :, :length], limits[row : row + 1])
        alone = search(model, *one, BeamSearch(3), SearchSettings(nbest=3, alpha=1.0))[0]
        assert [h.tokens for h in alone] == [h.tokens for h in together[row]]


@pytest.mark.parametrize("positions", ["alibi", "relative", "rotary"])
def test_a_run_with_positions_in_attention_trains_and_resumes_exactly(toy, tmp_path, positions):
    sets = ["model.arch=transformer", f"model.positions={positions}", "model.ff_dim=32"]
    straight, resumed = train_straight_and_resumed(
        toy, tmp_path, *sets, "train.valid_every=2", steps=4, stop=2
    )
    a, b = parameters(straight), parameters(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    saved = [name for name in a if "position_" in name]
    assert bool(saved) == (positions == "relative")  # only T5's is learned


def test_the_rnn_export_and_non_dot_types_refuse_them_in_one_line(toy, capsys) -> None:
    transformer = ["--set", "model.arch=transformer", "--set", "model.positions=rotary"]
    cases = {
        ("--set", "model.positions=alibi"): "positions=alibi is the Transformer's",  # an RNN
        (*transformer, "--set", "model.self_attention.type=bahdanau"): "does not: use one of",
        (*transformer, "--set", "model.self_attention.heads=16"): "a self-attention head has 1 ",
    }
    for sets, error in cases.items():
        assert run_cli("config", "--config", toy / "run.yaml", *sets) == 2
        line = capsys.readouterr().err
        assert line.count("\n") == 1 and error in line
    data = {"src": "de", "tgt": "en", "train": "t", "valid": "v"}
    model = {"arch": "transformer", "positions": "alibi"}
    problem = unexportable(config_from_dict({"data": data, "model": model}))
    assert problem.startswith("model.positions is alibi")


def test_a_new_encoding_is_one_registered_class(monkeypatch) -> None:
    """Registered, an encoding is a config value whose check the schema runs, a model the
    Transformer builds with its bias on every self-attention, and one the export refuses."""

    class Nearest(Positions):
        @classmethod
        def problem(cls, model: ModelConfig) -> str | None:
            return "nearest needs 2 heads" if model.heads(model.self_attention) != 2 else None

        @classmethod
        def bias(cls, heads: int, bidirectional: bool) -> DistanceBias:
            return DistanceBias(heads)

    monkeypatch.setitem(POSITION_TYPES, "nearest", Nearest)
    section = {"type": "multihead", "heads": 2}
    cfg = ModelConfig(arch="transformer", positions="nearest", self_attention=section)
    model = build_model(cfg, 30, 30, pad_id=0)
    scorers = [layer.self_attention.inner for layer in model.encoder_layers]
    assert all(isinstance(s.position_bias, DistanceBias) for s in scorers)
    with pytest.raises(ValueError, match="nearest needs 2 heads"):
        ModelConfig(arch="transformer", positions="nearest", self_attention={"heads": 4})
    data = {"src": "de", "tgt": "en", "train": "t", "valid": "v"}
    problem = unexportable(config_from_dict({"data": data, "model": cfg.model_dump()}))
    assert problem.startswith("model.positions is nearest")
    with pytest.raises(ValueError, match="'far' is none of the positional encodings: alibi"):
        ModelConfig(arch="transformer", positions="far")
