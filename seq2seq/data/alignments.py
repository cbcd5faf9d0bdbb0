"""Word alignments in Pharaoh format ("i-j": source word i, target word j, counted from 0;
"i?j" a possible link), and their pieces: what guided alignment trains the attention
towards (`data.alignments`), and what alignment scoring reads.

A word starts at each piece that begins with SentencePiece's word marker "▁" (and at the
first piece). A training pair's word links become links between every piece of the
source word and every piece of the target word; a batch holds them as each target
position's gold distribution over the source positions (`gold_attention`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from seq2seq.errors import UserError

WORD_START = "\u2581"


def piece_words(pieces: list[str]) -> list[int]:
    """The word index of each piece."""
    words, index = [], -1
    for piece in pieces:
        if index < 0 or piece.startswith(WORD_START):
            index += 1
        words.append(index)
    return words


def word_starts(vocabulary: list[str]) -> np.ndarray:
    """Whether each piece id of `vocabulary` starts a word (bool, by id)."""
    return np.fromiter(
        (piece.startswith(WORD_START) for piece in vocabulary), bool, len(vocabulary)
    )


def read_links(line: str, where: str) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """The sure and possible links of a Pharaoh line: "i-j" is a sure link of source word
    i and target word j (counted from 0), "i?j" a possible one; the sure are possible too.
    One line, naming `where`, for anything else."""
    sure, possible = set(), set()
    for link in line.split():
        mark = "-" if "-" in link else "?"
        i, _, j = link.partition(mark)
        if not (i.isdecimal() and j.isdecimal()):
            raise UserError(
                f"{where}: {link!r} is not a link; write i-j (sure) or i?j (possible), word "
                "numbers from 0"
            )
        (sure if mark == "-" else possible).add((int(i), int(j)))
    return sure, possible | sure


class PieceLinks:
    """Maps the word links of training pairs to links of their pieces, for a tokenizer whose
    source and target pieces start words as `src_starts` and `tgt_starts` say (by id)."""

    def __init__(self, src_starts: np.ndarray, tgt_starts: np.ndarray) -> None:
        self.starts = (src_starts, tgt_starts)

    def __call__(
        self, line: str, where: str, texts: tuple[str, str], ids: tuple[list[int], list[int]]
    ) -> np.ndarray:
        """(M, 2) int32 (source piece, target piece) links of a pair: its Pharaoh `line`,
        its source and target `texts` and their piece `ids`. One line, naming `where`, for
        a link beyond the pair's words, or a pair whose pieces make other words than its
        text's spaces (a tokenizer that normalises spaces away)."""
        words = []
        for side, text, row, starts in zip(
            ("source", "target"), texts, ids, self.starts, strict=True
        ):
            begins = starts[np.asarray(row, np.int64)]
            begins[:1] = True  # the first piece starts a word, marked or not
            of_piece = np.cumsum(begins) - 1
            made, count = int(of_piece[-1]) + 1 if len(row) else 0, len(text.split())
            if made != count:
                raise UserError(
                    f"{where}: the tokenizer makes {made} {side} words of a line of {count}; "
                    "guided alignment needs text whose words are separated by spaces and kept "
                    "by the tokenizer"
                )
            words.append((of_piece, count))
        (src_of, src_count), (tgt_of, tgt_count) = words
        linked = np.zeros((src_count, tgt_count), bool)
        for i, j in read_links(line, where)[1]:
            if i >= src_count or j >= tgt_count:
                raise UserError(
                    f"{where}: the link {i}-{j} is beyond the pair's {src_count} source and "
                    f"{tgt_count} target words (counted from 0); check that the alignments "
                    "are line by line with the corpus"
                )
            linked[i, j] = True
        return np.argwhere(linked[src_of][:, tgt_of]).astype(np.int32)


def gold_attention(
    links: list[np.ndarray | None], shifts: np.ndarray, shape: tuple[int, ...]
) -> Tensor:
    """(B, T, S) float32 gold attention of a batch of `shape` (rows, target positions,
    source positions): row b's target position j spreads 1 evenly over the source
    positions its piece is linked to (`links[b]`, each source piece moved `shifts[b]` on,
    past a tag); positions without links (EOS, padding, a pair without alignment) are 0."""
    gold = torch.zeros(shape)
    rows = [(b, found) for b, found in enumerate(links) if found is not None and len(found)]
    if rows:
        batch = np.concatenate([np.full(len(found), b) for b, found in rows])
        pieces = np.concatenate([found for _, found in rows]).astype(np.int64)
        source = pieces[:, 0] + shifts[batch]
        gold[torch.from_numpy(batch), torch.from_numpy(pieces[:, 1]), torch.from_numpy(source)] = 1
    return gold / gold.sum(-1, keepdim=True).clamp_min(1)
