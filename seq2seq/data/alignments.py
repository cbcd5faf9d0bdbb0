"""Word alignments in Pharaoh format ("i-j": source word i, target word j, counted from 0;
"i?j" a possible link), and their pieces: what guided alignment trains the attention
towards (`data.alignments`), and what alignment scoring reads.

A word starts at each piece that begins with SentencePiece's word marker "▁" (and at the
first piece). A training pair's word links become links between every piece of the
source word and every piece of the target word; a batch holds them as each target
position's gold distribution over the source positions (`gold_attention`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import chain
from pathlib import Path
from typing import NamedTuple

import numpy as np

from seq2seq.config.tokenizer import WORD_MARK
from seq2seq.data.corpus import read_lines
from seq2seq.errors import UserError


def piece_words(pieces: list[str]) -> list[int]:
    """The word index of each piece."""
    words, index = [], -1
    for piece in pieces:
        if index < 0 or piece.startswith(WORD_MARK):
            index += 1
        words.append(index)
    return words


def word_starts(vocabulary: list[str]) -> np.ndarray:
    """Whether each piece id of `vocabulary` starts a word (bool, by id)."""
    return np.fromiter((piece.startswith(WORD_MARK) for piece in vocabulary), bool, len(vocabulary))


_LINK = re.compile(r"[0-9]+[-?][0-9]+")
# A line of links alone, one after another, apart (checked whole, in C, before it is read).
_LINKS = re.compile(rf"\s*(?:{_LINK.pattern}(?:\s+|$))*")


def _not_a_link(where: str, link: str) -> UserError:
    return UserError(
        f"{where}: {link!r} is not a link; write i-j (sure) or i?j (possible), word numbers from 0"
    )


def read_links(line: str, where: str) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """The sure and possible links of a Pharaoh line: "i-j" is a sure link of source word
    i and target word j (counted from 0), "i?j" a possible one; the sure are possible too.
    One line, naming `where`, for anything else."""
    sure, possible = set(), set()
    for link in line.split():
        if not _LINK.fullmatch(link):
            raise _not_a_link(where, link)
        mark = "-" if "-" in link else "?"
        i, _, j = link.partition(mark)
        (sure if mark == "-" else possible).add((int(i), int(j)))
    return sure, possible | sure


def read_gold_alignments(path: Path, sources: list[str], targets: list[str]) -> list[str]:
    """The lines of `path` (a corpus's `{prefix}.align`), the word alignments of its pairs
    (`sources`, `targets`), each checked: links, within its pair's words (split at
    spaces). One line, naming the file and line, for anything else."""
    lines = read_lines(path)
    if len(lines) != len(sources):
        raise UserError(
            f"{path} has {len(lines)} lines for the {len(sources)} pairs of its corpus; give "
            "one alignment line per sentence pair"
        )
    for number, (line, src, tgt) in enumerate(zip(lines, sources, targets, strict=True), 1):
        words = len(src.split()), len(tgt.split())
        for i, j in read_links(line, f"{path}, line {number}")[1]:
            if i >= words[0] or j >= words[1]:
                raise UserError(
                    f"{path}, line {number}: the link {i}-{j} is beyond the pair's "
                    f"{words[0]} source and {words[1]} target words (counted from 0); check "
                    "that the alignments are line by line with the corpus"
                )
    return lines


class _Words(NamedTuple):
    """The words of a chunk's rows of pieces (one side), numbered across the chunk."""

    first_piece: np.ndarray  # each word's first piece, within its row
    pieces: np.ndarray  # each word's number of pieces
    row_first: np.ndarray  # each row's first word
    per_row: np.ndarray  # each row's number of words


class PieceLinks:
    """Maps the word links of training pairs to links of their pieces, for a tokenizer whose
    source and target pieces start words as `src_starts` and `tgt_starts` say (by id): a
    chunk of pairs at a time, its Pharaoh lines checked whole and its links expanded in
    array operations rather than pair by pair."""

    def __init__(self, src_starts: np.ndarray, tgt_starts: np.ndarray) -> None:
        self.starts = (src_starts, tgt_starts)

    def __call__(
        self,
        lines: list[str],
        texts: tuple[list[str], list[str]],
        ids: tuple[list[list[int]], list[list[int]]],
        where: Callable[[int], str],
    ) -> tuple[np.ndarray, np.ndarray]:
        """The (M, 2) int32 (source piece, target piece) links of the pairs of a chunk, pair
        after pair, and how many each pair has: from its Pharaoh `lines`, its source and
        target `texts` and their piece `ids`. One line, naming `where(pair)`, for a line
        that is not links, a link beyond its pair's words, or a pair whose pieces make
        other words than its text's spaces (a tokenizer that normalises spaces away)."""
        src, tgt = (
            self._words(side, texts[number], ids[number], where)
            for number, side in enumerate(("source", "target"))
        )
        pair, i, j = self._word_links(lines, where)
        beyond = np.flatnonzero((i >= src.per_row[pair]) | (j >= tgt.per_row[pair]))
        if beyond.size:
            k, p = beyond[0], pair[beyond[0]]
            raise UserError(
                f"{where(p)}: the link {i[k]}-{j[k]} is beyond the pair's {src.per_row[p]} "
                f"source and {tgt.per_row[p]} target words (counted from 0); check that the "
                "alignments are line by line with the corpus"
            )
        source, target = src.row_first[pair] + i, tgt.row_first[pair] + j
        across, down = src.pieces[source], tgt.pieces[target]
        size = across * down  # the piece links of each word link
        owner = np.repeat(np.arange(len(pair)), size)
        within = np.arange(len(owner)) - np.repeat(np.cumsum(size) - size, size)
        s = src.first_piece[source][owner] + within // down[owner]
        t = tgt.first_piece[target][owner] + within % down[owner]
        # A link given twice is kept twice: the gold attention it makes is the same.
        found = np.stack([s, t], axis=1).astype(np.int32)
        return found, np.bincount(pair[owner], minlength=len(lines))

    def _words(self, side: str, texts: list[str], rows: list[list[int]], where) -> _Words:
        """The words of `rows`, pieces of `texts`: one starts at each piece marked as a
        word's start and at each row's first piece."""
        lengths = np.fromiter(map(len, rows), np.int64, len(rows))
        flat = np.fromiter(chain.from_iterable(rows), np.int64, int(lengths.sum()))
        begins = self.starts[side == "target"][flat]
        row_start = np.cumsum(lengths) - lengths
        begins[row_start[lengths > 0]] = True
        counted = np.concatenate([[0], np.cumsum(begins)])
        per_row = counted[row_start + lengths] - counted[row_start]
        spaced = np.fromiter((len(text.split()) for text in texts), np.int64, len(texts))
        wrong = np.flatnonzero(per_row != spaced)
        if wrong.size:
            p = wrong[0]
            raise UserError(
                f"{where(p)}: the tokenizer makes {per_row[p]} {side} words of a line of "
                f"{spaced[p]}; guided alignment needs text whose words are separated by "
                "spaces and kept by the tokenizer"
            )
        first = np.flatnonzero(begins)
        row_first = counted[row_start]
        pieces = np.diff(np.append(first, len(flat)))
        owner = np.repeat(np.arange(len(rows)), per_row)
        return _Words(first - row_start[owner], pieces, row_first, per_row)

    @staticmethod
    def _word_links(lines: list[str], where) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(pair, source word, target word) of every link of `lines`, in order."""
        for p, line in enumerate(lines):
            if not _LINKS.fullmatch(line):
                bad = next(link for link in line.split() if not _LINK.fullmatch(link))
                raise _not_a_link(where(p), bad)
        counts = np.fromiter(map(len, map(str.split, lines)), np.int64, len(lines))
        numbers = re.findall(r"[0-9]+", " ".join(lines))
        words = np.fromiter(map(int, numbers), np.int64, len(numbers)).reshape(-1, 2)
        return np.repeat(np.arange(len(lines)), counts), words[:, 0], words[:, 1]


def gold_attention(
    links: list[np.ndarray | None], shifts: np.ndarray, shape: tuple[int, ...]
) -> np.ndarray:
    """(B, T, S) float32 gold attention of a batch of `shape` (rows, target positions,
    source positions): row b's target position j spreads 1 evenly over the source
    positions its piece is linked to (`links[b]`, each source piece moved `shifts[b]` on,
    past a tag); positions without links (EOS, padding, a pair without alignment) are 0."""
    gold = np.zeros(shape, np.float32)
    rows = [(b, found) for b, found in enumerate(links) if found is not None and len(found)]
    if rows:
        batch = np.concatenate([np.full(len(found), b) for b, found in rows])
        pieces = np.concatenate([found for _, found in rows]).astype(np.int64)
        gold[batch, pieces[:, 1], pieces[:, 0] + shifts[batch]] = 1
    return gold / np.maximum(gold.sum(-1, keepdims=True), 1)
