import pytest
import torch

from seq2seq.attention import attention_names, build_attention, padding_mask

TYPES = attention_names()


def test_registry_holds_the_foundation_types():
    assert {"dot", "general", "bahdanau"} <= set(TYPES)


def test_padding_mask():
    mask = padding_mask(torch.tensor([3, 1]), 4)
    assert mask.shape == (2, 1, 4)
    assert mask[0, 0].tolist() == [True, True, True, False]
    assert mask[1, 0].tolist() == [True, False, False, False]


@pytest.mark.parametrize("name", TYPES)
def test_masked_keys_get_zero_weight_and_rows_sum_to_one(name):
    torch.manual_seed(0)
    attention = build_attention(name, 8, 8)
    query, keys, values = torch.randn(3, 2, 8), torch.randn(3, 5, 8), torch.randn(3, 5, 6)
    mask = padding_mask(torch.tensor([5, 3, 1]), 5)
    out = attention(query, keys, values, mask)
    assert out.context.shape == (3, 2, 6)
    assert out.weights.shape == (3, 2, 5)
    assert torch.all(out.weights[1, :, 3:] == 0)
    assert torch.all(out.weights[2, :, 1:] == 0)
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(3, 2))
    # A single allowed key takes all the weight, so the context is exactly its value.
    torch.testing.assert_close(out.context[2], values[2, :1].expand(2, 6))


@pytest.mark.parametrize("name", TYPES)
def test_padding_values_do_not_leak_into_the_context(name):
    torch.manual_seed(0)
    attention = build_attention(name, 8, 8)
    query, keys, values = torch.randn(1, 2, 8), torch.randn(1, 5, 8), torch.randn(1, 5, 4)
    mask = padding_mask(torch.tensor([3]), 5)
    before = attention(query, keys, values, mask).context
    keys[:, 3:], values[:, 3:] = 1e3, -1e3
    torch.testing.assert_close(attention(query, keys, values, mask).context, before)


def test_dot_score_is_the_inner_product():
    attention = build_attention("dot", 4, 4)
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    torch.testing.assert_close(
        attention.score(query, keys), torch.einsum("bqd,bkd->bqk", query, keys)
    )


def test_general_score_is_bilinear():
    attention = build_attention("general", 4, 6)
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    expected = torch.einsum("bqd,de,bke->bqk", query, attention.proj.weight, keys)
    torch.testing.assert_close(attention.score(query, attention.prepare_keys(keys)), expected)


def test_bahdanau_score_is_additive():
    attention = build_attention("bahdanau", 4, 6)
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    w1, w2, v = attention.query_proj.weight, attention.key_proj.weight, attention.v.weight[0]
    expected = torch.tanh((query @ w1.T).unsqueeze(2) + (keys @ w2.T).unsqueeze(1)) @ v
    torch.testing.assert_close(attention.score(query, attention.prepare_keys(keys)), expected)
    assert attention.attends_before_cell
