"""Word alignments from attention weights, in Pharaoh format ("i-j": source word i, target word j).

Each target piece is aligned to the source piece it attends to most (heads averaged, the
EOS row and column left out); pieces map to the words they belong to, a word starting at
each piece that begins with SentencePiece's word marker "▁". Pairs are unique and sorted.
"""

from __future__ import annotations

from torch import Tensor

WORD_START = "\u2581"


def piece_words(pieces: list[str]) -> list[int]:
    """The word index of each piece."""
    words, index = [], -1
    for piece in pieces:
        if index < 0 or piece.startswith(WORD_START):
            index += 1
        words.append(index)
    return words


def word_alignment(
    weights: Tensor, src_pieces: list[str], tgt_pieces: list[str], src_words: int, tgt_words: int
) -> list[tuple[int, int]]:
    """(source word, target word) pairs from `weights` (T + 1, [heads,] S + 1), EOS last.

    Pairs outside the given word counts (a piece with no word of its own) are dropped.
    """
    if weights.dim() == 3:
        weights = weights.mean(dim=1)
    weights = weights[: len(tgt_pieces), : len(src_pieces)]
    if weights.numel() == 0:
        return []
    src_of, tgt_of = piece_words(src_pieces), piece_words(tgt_pieces)
    pairs = {
        (src_of[i], tgt_of[j])
        for j, i in enumerate(weights.argmax(dim=1).tolist())
        if src_of[i] < src_words and tgt_of[j] < tgt_words
    }
    return sorted(pairs)


def pharaoh(pairs: list[tuple[int, int]]) -> str:
    return " ".join(f"{i}-{j}" for i, j in pairs)
