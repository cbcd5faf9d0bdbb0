"""Lexical constraints' phrases, as a batch holds them: each sentence's phrases as target
piece ids (`Constraints`), and how an output that holds them is written (`verbatim_phrases`).
How a search places them: `constraints`."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.data.tokenizer import UNK_ID, Tokenizer

NONE = -1  # in `Constraints.tokens`: padding; in `constraints.Progress.next_pieces`: no piece


@dataclass(frozen=True)
class Constraints:
    """The phrases of a batch's sentences as piece ids."""

    tokens: Tensor  # (B, C, L) phrase c of sentence b, NONE after its pieces
    lengths: Tensor  # (B, C) its pieces; 0: no phrase (a sentence with fewer than C)
    most: int  # the most pieces of a sentence's phrases (read once, not at every step)

    @classmethod
    def of(cls, phrases: list[list[list[int]]], device: torch.device) -> Constraints:
        """From each sentence's phrases (lists of piece ids; an empty list: none)."""
        count = max(1, max(map(len, phrases)))
        longest = max([1, *(len(p) for sentence in phrases for p in sentence)])
        tokens = torch.full((len(phrases), count, longest), NONE, dtype=torch.long)
        lengths = torch.zeros(len(phrases), count, dtype=torch.long)
        for b, sentence in enumerate(phrases):
            for c, phrase in enumerate(sentence):
                tokens[b, c, : len(phrase)] = torch.tensor(phrase)
                lengths[b, c] = len(phrase)
        most = max(sum(map(len, sentence)) for sentence in phrases)
        return cls(tokens.to(device), lengths.to(device), most)

    @property
    def totals(self) -> Tensor:
        """(B,) constraint pieces of each sentence."""
        return self.lengths.sum(1)


def verbatim_phrases(
    texts: list[str], phrases: list[str], ids: list[list[int]], tokenizer: Tokenizer
) -> list[str]:
    """`texts`, outputs that hold `phrases` (their piece ids `ids`), with each phrase that
    has an unknown piece written as given: such a phrase's pieces, which the output holds
    in a row, decode to its text with the unknown mark (⁇) in place of the characters the
    vocabulary lacks, and that text is replaced by the phrase's own."""
    pairs = zip(phrases, ids, strict=True)
    marked = [(phrase, pieces) for phrase, pieces in pairs if UNK_ID in pieces]
    if not marked:
        return texts
    surfaces = tokenizer.decode_tgt([pieces for _, pieces in marked])
    for (phrase, _), surface in zip(marked, surfaces, strict=True):
        texts = [text.replace(surface, phrase.strip()) for text in texts]
    return texts
