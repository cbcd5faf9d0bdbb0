"""ALiBi (`model.positions: alibi`): the slopes and the bias by hand, the fused kernels
equal to the weights' path, the Transformer's cache and batching with it, and what is
refused."""

from __future__ import annotations

import pytest
import torch
from cli_helpers import run_cli, train_straight_and_resumed
from test_cli import parameters
from test_models import batch, tiny

from seq2seq.attention import build_attention
from seq2seq.attention.alibi import DistanceBias, alibi_slopes
from seq2seq.config import AttentionConfig, config_from_dict
from seq2seq.decode.export import unexportable
from seq2seq.decode.search import beam_search, output_limits


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


@pytest.mark.parametrize("name, heads", [("scaled-dot", 1), ("scaled-dot", 4), ("multihead", 4)])
def test_the_fused_kernels_add_the_bias_as_the_weights_path_does(name, heads) -> None:
    torch.manual_seed(0)
    attention = build_attention(AttentionConfig(type=name), 16, 16, heads=heads).eval()
    scorer = attention.inner if heads > 1 else attention
    scorer.position_bias = DistanceBias(heads)
    query, keys = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    mask = torch.ones(2, 5, 5, dtype=torch.bool).tril()  # causal, as in the decoder
    mask[1, :, 3:] = False
    positions = torch.arange(5).expand(2, 5)
    slow = attention(query, keys, keys, mask, positions, need_weights=True)
    fast = attention(query, keys, keys, mask, positions, need_weights=False)
    assert fast.weights is None
    torch.testing.assert_close(fast.context, slow.context, atol=1e-5, rtol=1e-5)
    scorer.position_bias = None  # and the bias does change the context
    assert not torch.allclose(attention(query, keys, keys, mask, positions).context, slow.context)


def test_an_alibi_transformer_decodes_a_sentence_alone_as_in_a_padded_batch() -> None:
    # (Its cache against teacher forcing: test_models.py's variant transformer-alibi.)
    model = tiny("transformer", "bahdanau", positions="alibi")
    assert not model.src_embed.add_positions
    src, mask, _ = batch()
    lengths = mask[:, 0].sum(-1)
    limits = output_limits(lengths, 2.0, 2)
    together = beam_search(model, src, mask, limits, 2, 3, beam=3, nbest=3, alpha=1.0)
    for row, length in enumerate(lengths.tolist()):
        one = (src[row : row + 1, :length], mask[row : row + 1, :, :length], limits[row : row + 1])
        alone = beam_search(model, *one, 2, 3, beam=3, nbest=3, alpha=1.0)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in together[row]]


def test_an_alibi_run_trains_and_resumes_exactly(toy, tmp_path) -> None:
    sets = ["model.arch=transformer", "model.positions=alibi", "model.ff_dim=32"]
    straight, resumed = train_straight_and_resumed(
        toy, tmp_path, *sets, "train.valid_every=2", steps=4, stop=2
    )
    a, b = parameters(straight), parameters(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not any("position_bias" in name for name in a)  # derived, not saved


def test_the_rnn_and_export_refuse_alibi_in_one_line(toy, capsys) -> None:
    sets = ["--set", "model.positions=alibi"]  # the toy config's RNN
    assert run_cli("config", "--config", toy / "run.yaml", *sets) == 2
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and "positions=alibi is the Transformer's" in line
    data = {"src": "de", "tgt": "en", "train": "t", "valid": "v"}
    model = {"arch": "transformer", "positions": "alibi"}
    problem = unexportable(config_from_dict({"data": data, "model": model}))
    assert problem.startswith("model.positions is alibi")
