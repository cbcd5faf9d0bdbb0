"""Word alignments from attention weights, in Pharaoh format ("i-j": source word i, target
word j), and word alignments scored against gold ones (AER).

Each target piece is aligned to the source piece it attends to most (heads averaged, or
one head's; the EOS row and column left out); pieces map to the words they belong to, a
word starting at each piece that begins with SentencePiece's word marker "▁". Pairs are
unique and sorted.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from seq2seq.data.alignments import piece_words, read_links
from seq2seq.errors import UserError


def word_alignment(
    weights: Tensor,
    src_pieces: list[str],
    tgt_pieces: list[str],
    src_words: int,
    tgt_words: int,
    head: int | None = None,
) -> list[tuple[int, int]]:
    """(source word, target word) pairs from `weights` (T + 1, [heads,] S + 1), EOS last:
    the heads' mean, or `head`'s weights alone.

    Pairs outside the given word counts (a piece with no word of its own) are dropped.
    """
    if weights.dim() == 3:
        weights = weights.mean(dim=1) if head is None else weights[:, head]
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


@dataclass(frozen=True)
class AlignmentScores:
    """Word alignments scored against gold ones (Och and Ney, 2003), over a corpus: with
    hypothesis links A, sure gold links S and possible ones P (S within P),

        precision = |A & P| / |A|,  recall = |A & S| / |S|,
        AER = 1 - (|A & S| + |A & P|) / (|A| + |S|)   (0: every sure link, nothing outside P)
    """

    pairs: int
    links: int  # |A|
    sure: int  # |S|
    possible: int  # |P|, the sure links among them
    hits_sure: int  # |A & S|
    hits_possible: int  # |A & P|

    @property
    def aer(self) -> float:
        return 1 - (self.hits_sure + self.hits_possible) / max(self.links + self.sure, 1)

    @property
    def precision(self) -> float:
        return self.hits_possible / max(self.links, 1)

    @property
    def recall(self) -> float:
        return self.hits_sure / max(self.sure, 1)

    def to_dict(self) -> dict[str, float | int]:
        rates = {"aer": self.aer, "precision": self.precision, "recall": self.recall}
        return {k: round(100 * v, 2) for k, v in rates.items()} | {
            "pairs": self.pairs,
            "links": self.links,
            "sure": self.sure,
            "possible": self.possible,
        }

    def __str__(self) -> str:
        return (
            f"AER {100 * self.aer:.2f}  precision {100 * self.precision:.2f}  recall "
            f"{100 * self.recall:.2f}  ({self.pairs} pairs, {self.links} links; gold "
            f"{self.sure} sure, {self.possible} possible)"
        )


def alignment_error_rate(hypotheses: list[str], gold: list[str]) -> AlignmentScores:
    """`hypotheses`' links (Pharaoh lines; a possible mark counts as a link) scored against
    `gold`'s, line by line."""
    if len(hypotheses) != len(gold):
        raise UserError(
            f"{len(hypotheses)} alignment lines but {len(gold)} gold lines; give one line per "
            "sentence pair in each"
        )
    counts = [0] * 5
    for number, (found, truth) in enumerate(zip(hypotheses, gold, strict=True), 1):
        links = read_links(found, f"alignment line {number}")[1]
        sure, possible = read_links(truth, f"gold line {number}")
        for k, n in enumerate((len(links), len(sure), len(possible))):
            counts[k] += n
        counts[3] += len(links & sure)
        counts[4] += len(links & possible)
    return AlignmentScores(len(gold), *counts)
