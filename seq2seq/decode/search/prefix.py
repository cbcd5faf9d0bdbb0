"""Target prefixes: a given start of an output, kept verbatim, that the search decodes on from.

A prefix is target text. Its pieces are the target SentencePiece model's (no EOS), and the
search forces them as an output's first tokens: at step t < |prefix| a row may take only
the prefix's t-th piece, at the log-probability the model gives it (teacher-forced, so a
hypothesis scores what forced scoring gives its whole output), and searches freely after
it. Greedy search, beams, samples and n-best lists all start with the prefix; the prefix's
pieces count towards the length limit, which is raised where a prefix would not fit with
its EOS.

SentencePiece keeps no whitespace at the end of a text, so a prefix that ends in
whitespace ("Two men ") says what its pieces cannot: its last word is complete. There the
first piece after the prefix must start a word (or be EOS); a prefix that ends otherwise
("Two m") lets the model complete its last word or start a new one. The output text is the
prefix's text verbatim, then what the pieces after the prefix's add when SentencePiece
joins them to it (a piece that starts a word brings its space, unless the prefix ends in
whitespace already), so that it starts with exactly the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.config.tokenizer import WORD_MARK  # a piece that starts with it starts a word
from seq2seq.data.tokenizer import EOS_ID, Tokenizer

FREE = -1  # in `Prefixes.steps`: the row chooses freely
NEW_WORD = -2  # the row's next piece must start a word (or be EOS)


@dataclass(frozen=True)
class Prefix:
    """One line's prefix: its text, kept verbatim, and its target pieces' ids."""

    text: str
    ids: list[int]

    @property
    def new_word(self) -> bool:
        """Whether what follows must start a word: the text ends in whitespace."""
        return self.text[-1:].isspace()

    def texts(self, tokenizer: Tokenizer, outputs: list[list[int]]) -> list[str]:
        """Each output (piece ids that start with this prefix's) as text that starts with
        the prefix's text verbatim (see the module)."""
        head, *whole = tokenizer.decode_tgt([self.ids, *outputs])
        tails = [text[len(head) :] for text in whole]
        return [self.text + (t.removeprefix(" ") if self.new_word else t) for t in tails]


def read_prefixes(tokenizer: Tokenizer, texts: list[str] | None, count: int) -> list[Prefix | None]:
    """The prefix of each of `count` lines (None: none given, or a blank one)."""
    if texts is None:
        return [None] * count
    given = [i for i, text in enumerate(texts) if text.strip()]
    found: list[Prefix | None] = [None] * count
    for i, ids in zip(given, tokenizer.encode_tgt([texts[i] for i in given]), strict=True):
        found[i] = Prefix(texts[i], ids)
    return found


def output_texts(
    tokenizer: Tokenizer, prefix: Prefix | None, outputs: list[list[int]]
) -> list[str]:
    """The text of each output of a line, starting with its prefix's verbatim if it has one."""
    return tokenizer.decode_tgt(outputs) if prefix is None else prefix.texts(tokenizer, outputs)


def fitted_limits(max_lengths: Tensor, lengths: Tensor) -> Tensor:
    """(B,) output limits (EOS included), raised where a prefix of `lengths` (B,) pieces
    would not fit with its EOS."""
    return torch.maximum(max_lengths, (lengths + 1).to(max_lengths.device))


def word_starts(tokenizer: Tokenizer) -> Tensor:
    """(V,) whether each target piece may follow a prefix that ends in whitespace: the
    pieces that start a word, and EOS."""
    starts = torch.tensor([p.startswith(WORD_MARK) for p in tokenizer.tgt_vocabulary()])
    starts[EOS_ID] = True
    return starts


@dataclass
class Prefixes:
    """A batch's prefixes as the search keeps to them, on the device."""

    # (B, P + 1), P the longest prefix: each sentence's pieces, then NEW_WORD or FREE
    steps: Tensor
    lengths: Tensor  # (B,) the pieces of each sentence's prefix
    word_starts: Tensor  # (V,) `word_starts`

    @classmethod
    def of(cls, prefixes: list[Prefix | None], starts: Tensor) -> Prefixes:
        """The search's prefixes of a batch's sentences (some with one), on `starts`'
        device. A batch without any is searched without `Prefixes`, at no cost."""
        lengths = [0 if prefix is None else len(prefix.ids) for prefix in prefixes]
        steps = torch.full((len(prefixes), max(lengths) + 1), FREE)
        for row, prefix in enumerate(prefixes):
            if prefix is not None:
                steps[row, : len(prefix.ids)] = torch.tensor(prefix.ids, dtype=torch.long)
                steps[row, len(prefix.ids)] = NEW_WORD if prefix.new_word else FREE
        device = starts.device
        return cls(steps.to(device), torch.tensor(lengths, device=device), starts)

    def at(self, t: int, sentences: Tensor, width: int, log_probs: Tensor) -> PrefixStep | None:
        """What the prefixes of the `sentences` (A,) ask of their rows (A * `width`) at step
        `t`, with the score that the step's `log_probs` (rows, V) give each piece forced;
        None past every prefix."""
        if t >= self.steps.size(1):
            return None
        code = self.steps[sentences, t].repeat_interleave(width)
        piece = code.clamp(min=0).unsqueeze(1)
        return PrefixStep(code, piece, log_probs.gather(1, piece), self.word_starts)


@dataclass
class PrefixStep:
    """One step of the prefixes, per row: its code (a piece forced, NEW_WORD or FREE), the
    piece forced (0 where none), that piece's log-probability, and `word_starts`."""

    code: Tensor  # (rows,)
    piece: Tensor  # (rows, 1)
    score: Tensor  # (rows, 1)
    word_starts: Tensor  # (V,)

    def keep_to_(self, log_probs: Tensor) -> Tensor:
        """`log_probs` (rows, V) with -inf where a row would leave its prefix, and each
        forced piece at its own score again (whatever was masked since), in place."""
        forced = (self.code >= 0).unsqueeze(1)
        off = forced | ((self.code == NEW_WORD).unsqueeze(1) & ~self.word_starts)
        log_probs.masked_fill_(off, float("-inf"))
        kept = torch.where(forced, self.score, log_probs.gather(1, self.piece))
        return log_probs.scatter_(1, self.piece, kept)
