import torch

from seq2seq.decode.alignment import pharaoh, piece_words, word_alignment


def test_pieces_map_to_the_words_they_belong_to():
    assert piece_words(["▁the", "▁sun", "ny", "▁day"]) == [0, 1, 1, 2]
    assert piece_words(["sun", "ny", "▁day"]) == [0, 0, 1]
    assert piece_words(["▁", "Ü", "▁x"]) == [0, 0, 1]


def test_each_target_piece_links_to_its_most_attended_source_word():
    src = ["▁ein", "▁Hund", "e", "▁läuft"]  # 3 words
    tgt = ["▁a", "▁dog", "▁run", "s"]  # 3 words
    weights = torch.zeros(len(tgt) + 1, len(src) + 1)  # + EOS row and column
    for j, i in enumerate([0, 2, 3, 3]):
        weights[j, i] = 1.0
    weights[-1, -1] = 1.0
    pairs = word_alignment(weights, src, tgt, 3, 3)
    assert pairs == [(0, 0), (1, 1), (2, 2)]
    assert pharaoh(pairs) == "0-0 1-1 2-2"
    heads = torch.stack([weights, weights.roll(1, dims=1)], dim=1)  # (T, heads, S)
    heads[:, 1] = 0.0
    assert word_alignment(heads, src, tgt, 3, 3) == pairs  # heads averaged


def test_links_outside_the_words_are_dropped_and_empty_output_has_none():
    weights = torch.eye(3)
    assert word_alignment(weights, ["▁a", "▁b"], ["▁x", "▁y"], 2, 1) == [(0, 0)]
    assert word_alignment(torch.ones(1, 3), ["▁a", "▁b"], [], 2, 0) == []
