"""The model contract, checked the same way for every architecture and attention type."""

import pytest
import torch

from seq2seq.attention import attention_class, attention_names
from seq2seq.config import ModelConfig
from seq2seq.data.padded_batches import padding_mask
from seq2seq.decode.search.beams import SearchSettings
from seq2seq.decode.search.loop import output_limits, search
from seq2seq.decode.search.strategy import BeamSearch
from seq2seq.models import build_model

ARCHS = ["rnn", "transformer"]
# Every registered type, plus multi-head over a Bahdanau (before the cell) and a local score.
ATTENTIONS = [(name, None) for name in attention_names()] + [("bahdanau", 2), ("local-p", 2)]
ATTENTION_IDS = [name if heads is None else f"{name}-h{heads}" for name, heads in ATTENTIONS]
# The variants each architecture has: the RNN's cell, the Transformer's norm placement and
# positions.
VARIANTS = [
    ("rnn", {"cell": "lstm"}),
    ("rnn", {"cell": "gru"}),
    ("transformer", {"norm": "pre"}),
    ("transformer", {"norm": "post"}),
    ("transformer", {"positions": "alibi"}),
    ("transformer", {"positions": "rotary"}),
]
VARIANT_IDS = [f"{arch}-{next(iter(option.values()))}" for arch, option in VARIANTS]


def small_window(attention: str) -> dict:
    """window: 2 for the types that read it, so that short sources exercise the window."""
    return {"window": 2} if "window" in attention_class(attention).options else {}


def tiny(arch="rnn", attention="bahdanau", heads=None, length_ratio=0.7, **kw):
    cfg = ModelConfig(
        arch=arch,
        embed_dim=16,
        hidden_dim=16,
        ff_dim=32,
        encoder_layers=2,
        decoder_layers=2,
        dropout=0.0,
        attention={"type": attention, "heads": heads, **small_window(attention)},
        **kw,
    )
    torch.manual_seed(0)
    model = build_model(cfg, 30, 40, pad_id=0).eval()
    model.length_ratio.fill_(length_ratio)
    return model


def batch():
    torch.manual_seed(1)
    src = torch.randint(4, 30, (3, 6))
    lengths = torch.tensor([6, 4, 2])
    src = src.masked_fill(~padding_mask(lengths, 6)[:, 0], 0)
    return src, padding_mask(lengths, 6), torch.randint(4, 40, (3, 5))


def steps_checked_against_teacher_forcing(model) -> list:
    """The decoding steps of `batch()`'s targets, each checked against the teacher-forced
    pass (for the Transformer: the KV cache against the causal full pass)."""
    src, mask, tgt = batch()
    steps = []
    with torch.no_grad():
        full = model(src, mask, tgt).log_softmax(-1)
        memory = model.encode(src, mask)
        state = model.init_state(memory)
        for t in range(tgt.size(1)):
            steps.append(model.decode_step(memory, state, tgt[:, t]))
            state = steps[-1].state
            torch.testing.assert_close(steps[-1].log_probs, full[:, t], atol=1e-5, rtol=1e-5)
    return steps


@pytest.mark.parametrize("attention, heads", ATTENTIONS, ids=ATTENTION_IDS)
@pytest.mark.parametrize("arch, variant", VARIANTS, ids=VARIANT_IDS)
def test_step_by_step_decoding_equals_teacher_forcing(arch, variant, attention, heads):
    for step in steps_checked_against_teacher_forcing(tiny(arch, attention, heads, **variant)):
        assert step.attention.shape[-1] == 6 and step.attention.dim() in (2, 3)
        assert torch.all(step.attention[2, ..., 2:] == 0)  # padding gets no attention


@pytest.mark.parametrize("attention, heads", ATTENTIONS, ids=ATTENTION_IDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_decoding_without_weights_finds_the_same_and_keeps_no_weights(arch, attention, heads):
    model = tiny(arch, attention, heads=heads)
    src, mask, tgt = batch()
    with torch.no_grad():
        memory = model.encode(src, mask)
        weighed = bare = model.init_state(memory)
        for t in range(tgt.size(1)):
            with_weights = model.decode_step(memory, weighed, tgt[:, t])
            without = model.decode_step(memory, bare, tgt[:, t], need_weights=False)
            torch.testing.assert_close(without.log_probs, with_weights.log_probs)
            assert with_weights.attention is not None
            if attention in ("scaled-dot", "multihead"):  # a fused path: no weights formed
                assert without.attention is None
            weighed, bare = with_weights.state, without.state
    limits = output_limits(mask[:, 0].sum(-1), 2.0, 2)
    found = search(model, src, mask, limits, BeamSearch(3), SearchSettings(nbest=2, alpha=1.0))
    fast = search(
        model, src, mask, limits, BeamSearch(3), SearchSettings(nbest=2, alpha=1.0, attention=False)
    )
    tokens = [[h.tokens for h in hyps] for hyps in found]
    assert [[h.tokens for h in hyps] for hyps in fast] == tokens
    for hyps, fast_hyps in zip(found, fast, strict=True):
        assert [h.score for h in fast_hyps] == pytest.approx([h.score for h in hyps], abs=1e-5)
        assert all(h.attention is None for h in fast_hyps)
        assert all(h.attention is not None for h in hyps)


@pytest.mark.parametrize("attention, heads", ATTENTIONS, ids=ATTENTION_IDS)
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("beam", [1, 3])
def test_a_sentence_decodes_alone_as_inside_a_padded_batch(arch, attention, heads, beam):
    model = tiny(arch, attention, heads=heads)
    src, mask, _ = batch()
    lengths = mask[:, 0].sum(-1)
    limits = output_limits(lengths, 2.0, 2)
    together = search(
        model, src, mask, limits, BeamSearch(beam), SearchSettings(nbest=beam, alpha=1.0)
    )
    for row, length in enumerate(lengths.tolist()):
        alone = search(
            model,
            src[row : row + 1, :length],
            mask[row : row + 1, :, :length],
            limits[row : row + 1],
            BeamSearch(beam),
            SearchSettings(nbest=beam, alpha=1.0),
        )[0]
        assert [h.tokens for h in alone] == [h.tokens for h in together[row]]
        for a, b in zip(alone, together[row], strict=True):
            assert a.score == pytest.approx(b.score, abs=1e-5)
            torch.testing.assert_close(a.attention, b.attention, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_extra_source_padding_changes_nothing(arch):
    model = tiny(arch)
    src, mask, tgt = batch()
    padded = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    with torch.no_grad():
        a = model(src, mask, tgt)
        b = model(padded, padding_mask(mask[:, 0].sum(-1), 10), tgt)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_step_on_reordered_state_is_the_reordered_step(arch):
    model = tiny(arch, "general")
    src, mask, tgt = batch()
    index = torch.tensor([2, 0, 0])
    with torch.no_grad():
        memory = model.encode(src, mask)
        state = model.init_state(memory)
        for t in range(2):
            state = model.decode_step(memory, state, tgt[:, t]).state
        step = model.decode_step(memory, state, tgt[:, 2])
        moved = model.decode_step(
            memory.index_select(index), state.index_select(index), tgt[index, 2]
        )
    torch.testing.assert_close(moved.log_probs, step.log_probs[index])
    torch.testing.assert_close(moved.attention, step.attention[index])


@pytest.mark.parametrize("attention, heads", ATTENTIONS, ids=ATTENTION_IDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_beams_sharing_a_source_step_as_rows_with_copies_of_it(arch, attention, heads):
    # A widened memory attends with each source's beams as its queries: the same as
    # every row reading its own copy of the source.
    model = tiny(arch, attention, heads=heads)
    src, mask, tgt = batch()
    beam = 3
    copies = torch.arange(3).repeat_interleave(beam)
    with torch.no_grad():
        memory = model.encode(src, mask)
        shared, copied = memory.widened(beam), memory.index_select(copies)
        assert shared.rows == copied.rows == 9
        a, b = model.init_state(shared), model.init_state(copied)
        tokens = torch.randint(4, 40, (9, 4), generator=torch.Generator().manual_seed(3))
        for t in range(4):
            step_a = model.decode_step(shared, a, tokens[:, t])
            step_b = model.decode_step(copied, b, tokens[:, t])
            torch.testing.assert_close(step_a.log_probs, step_b.log_probs, atol=1e-6, rtol=1e-6)
            torch.testing.assert_close(step_a.attention, step_b.attention, atol=1e-6, rtol=1e-6)
            # As beam search does: each row continues a row of its own source.
            parents = torch.randint(0, beam, (9,), generator=torch.Generator().manual_seed(t))
            rows = copies * beam + parents
            a, b = step_a.state.index_select(rows), step_b.state.index_select(rows)


@pytest.mark.parametrize("arch", ARCHS)
def test_local_m_centres_on_the_step_times_the_length_ratio(arch):
    # window 2, length ratio 0.5: step t sees source positions t/2 - 2 .. t/2 + 2 only.
    model = tiny(arch, "local-m", length_ratio=0.5)
    torch.manual_seed(2)
    src = torch.randint(4, 30, (1, 12))
    mask = padding_mask(torch.tensor([12]), 12)
    tgt = torch.randint(4, 40, (1, 12))
    steps = torch.arange(12)
    with torch.no_grad():
        memory = model.encode(src, mask)
        state = model.init_state(memory)
        for t in range(12):
            step = model.decode_step(memory, state, tgt[:, t])
            state = step.state
            inside = (steps - t * 0.5).abs() <= 2
            weights = step.attention[0]  # (S,) or (heads, S)
            assert torch.all(weights[..., ~inside] == 0) and torch.all(weights[..., inside] > 0)


@pytest.mark.parametrize("arch", ARCHS)
def test_training_fits_a_copy_task_and_greedy_reproduces_it(arch):
    torch.manual_seed(0)
    cfg = ModelConfig(
        arch=arch, embed_dim=32, hidden_dim=32, ff_dim=64, dropout=0.0,
        attention={"type": "general"},
    )  # fmt: skip
    model = build_model(cfg, 12, 12, pad_id=0)
    src = torch.randint(4, 12, (16, 5))
    src = torch.cat([src, torch.full((16, 1), 3)], dim=1)  # EOS = 3
    tgt_in = torch.cat([torch.full((16, 1), 2), src[:, :-1]], dim=1)  # BOS = 2
    mask = padding_mask(torch.full((16,), 6))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(150):
        loss = torch.nn.functional.cross_entropy(
            model(src, mask, tgt_in).flatten(0, 1), src.flatten()
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0]
    limits = output_limits(torch.full((16,), 6), 2.0, 2)
    best = [hyps[0] for hyps in search(model.eval(), src, mask, limits, BeamSearch(1))]
    assert [h.tokens for h in best] == src[:, :-1].tolist()
    assert best[0].attention.shape[0] == 6 and best[0].attention.shape[-1] == 6
