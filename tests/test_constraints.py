"""Lexical constraints in beam search (decode/constraints.py): every output contains its
sentence's phrases, an exhaustive search finds the best outputs that do, and sentences
without phrases are searched as before."""

import pytest
import torch
from test_search import ARCHS, BOS, EOS, every_output, sequence_log_prob, source, tiny

from seq2seq.decode.constraints import NONE, Constraints, Progress
from seq2seq.decode.sampling import Sampler
from seq2seq.decode.search import beam_search, length_penalty


def contains(output: list[int], phrase: list[int]) -> bool:
    return any(output[i : i + len(phrase)] == phrase for i in range(len(output)))


def walk(phrases: list[list[int]], tokens: list[int]) -> Progress:
    """The progress of one hypothesis after `tokens`."""
    constraints = Constraints.of([phrases], torch.device("cpu"))
    progress = Progress.start(1, len(phrases), torch.device("cpu"))
    for token in tokens:
        progress = progress.after(torch.tensor([token]), constraints.tokens, constraints.lengths)
    return progress


@pytest.mark.parametrize(
    "tokens, met, active, position",
    [
        ([7, 8], [False, False], 0, 2),
        ([7, 8, 9], [True, False], NONE, 0),
        ([7, 8, 5, 7, 8, 9], [True, False], NONE, 0),  # interrupted, then started over
        ([7, 7, 8, 9], [True, False], NONE, 0),  # the second 7 starts it again
        ([4, 7, 8, 9], [True, True], NONE, 0),  # a phrase of one piece is met at once
        ([7, 4, 9], [False, True], NONE, 0),
    ],
)
def test_progress_follows_the_phrases_piece_by_piece(tokens, met, active, position):
    progress = walk([[7, 8, 9], [4]], tokens)
    assert progress.met[0].tolist() == met
    assert int(progress.active[0]) == active and int(progress.position[0]) == position
    lengths = torch.tensor([[3, 1]])
    assert bool(progress.complete(lengths)[0]) == all(met)
    assert int(progress.pieces_met(lengths)[0]) == 3 * met[0] + met[1] + position


@pytest.mark.parametrize("arch", ARCHS)
def test_an_exhaustive_beam_finds_the_best_outputs_that_hold_the_phrases(arch):
    """Every output of at most 4 tokens over 6 ids, scored the plain way: the 8 best that
    contain both phrases, in order and at their scores."""
    vocab, limit, alpha = 6, 5, 1.0
    model = tiny(arch, vocab)
    src, mask = source((5,))
    phrases = [[4, 5], [1]]
    scored = sorted(
        (
            sequence_log_prob(model, src, mask, seq) / float(length_penalty(len(seq) + 1.0, alpha)),
            seq,
        )
        for seq in every_output(vocab, limit)
        if all(contains(seq, phrase) for phrase in phrases)
    )[::-1]
    beam = vocab ** (limit - 1)  # every open prefix kept, every EOS among the K best
    found = beam_search(
        model, src, mask, torch.tensor([limit]), BOS, EOS, beam, 8, alpha, stopping="exact",
        constraints=Constraints.of([phrases], torch.device("cpu")),
    )[0]  # fmt: skip
    assert [h.tokens for h in found] == [seq for _, seq in scored[:8]]
    assert [h.score for h in found] == pytest.approx([score for score, _ in scored[:8]], abs=1e-4)
    plain = beam_search(model, src, mask, torch.tensor([limit]), BOS, EOS, beam, 1, alpha)
    assert plain[0][0].tokens != found[0].tokens  # the phrases changed the best output


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("beam", [2, 5])
def test_every_output_of_a_narrow_beam_holds_its_phrases(arch, beam):
    model = tiny(arch)
    src, mask = source((6, 4, 2))
    phrases = [[[7, 8, 9], [11]], [], [[12, 13]]]
    limits = torch.tensor([6, 5, 3])  # raised to fit the phrases and the EOS
    found = beam_search(
        model, src, mask, limits, BOS, EOS, beam, beam, 0.5,
        constraints=Constraints.of(phrases, torch.device("cpu")),
    )  # fmt: skip
    plain = beam_search(model, src, mask, limits, BOS, EOS, beam, beam, 0.5)
    for sentence, hypotheses in zip(phrases, found, strict=True):
        assert hypotheses
        for hypothesis in hypotheses:
            assert all(contains(hypothesis.tokens, phrase) for phrase in sentence)
    assert not any(contains(h.tokens, [7, 8, 9]) for h in plain[0])
    # A sentence without phrases among others with some: the search it would have alone.
    alone = beam_search(
        model, src[1:2, :4], mask[1:2, :, :4], limits[1:2], BOS, EOS, beam, beam, 0.5
    )
    assert [h.tokens for h in found[1]] == [h.tokens for h in alone[0]]


@pytest.mark.parametrize("arch", ARCHS)
def test_no_phrases_is_the_plain_search(arch):
    model = tiny(arch)
    src, mask = source()
    limits = torch.tensor([9, 7, 4])
    none = Constraints.of([[], [], []], torch.device("cpu"))
    for beam in (2, 4):
        plain = beam_search(model, src, mask, limits, BOS, EOS, beam, 2, 1.0)
        constrained = beam_search(
            model, src, mask, limits, BOS, EOS, beam, 2, 1.0, constraints=none
        )
        for a, b in zip(plain, constrained, strict=True):
            assert [h.tokens for h in a] == [h.tokens for h in b]
            assert [h.score for h in a] == pytest.approx([h.score for h in b])


def test_a_sentence_whose_phrases_cannot_be_placed_has_no_output():
    model = tiny("rnn")
    src, mask = source((4, 3))
    phrases = Constraints.of([[[7, 7]], [[9]]], torch.device("cpu"))
    # No output repeats a piece (no_repeat_ngram 1), so none can hold 7 7.
    found = beam_search(
        model, src, mask, torch.tensor([6, 6]), BOS, EOS, 3, 2, 0.0,
        no_repeat_ngram=1, constraints=phrases,
    )  # fmt: skip
    assert found[0] == [] and found[1] and all(contains(h.tokens, [9]) for h in found[1])


def test_samples_refuse_constraints():
    model = tiny("rnn")
    src, mask = source((4,))
    phrases = Constraints.of([[[7]]], torch.device("cpu"))
    with pytest.raises(ValueError, match="lexical constraints need beam search"):
        beam_search(
            model, src, mask, torch.tensor([5]), BOS, EOS, 2, 1, 0.0,
            sampler=Sampler(torch.rand(1, 2, 5)), constraints=phrases,
        )  # fmt: skip
