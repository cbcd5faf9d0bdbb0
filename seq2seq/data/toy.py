"""A built-in toy translation task that needs attention.

The "languages" share a fixed bilingual lexicon of invented words: lowercase source
words such as "labe" map one-to-one to capitalised target words such as "Coha". A source
sentence is 3 to `max_words` lexicon words drawn uniformly at random; its translation is
the word-by-word translation in reversed order, so the first target word depends on the
last source word. An encoder-decoder that must squeeze the whole sentence into one vector
degrades as sentences grow, while attention can look up the aligned source word directly.

The lexicon comes from a fixed seed and is the same for every corpus; the data seed only
chooses the sentences. Each split draws from its own seed, so the test set is not a copy
of the training set, but identical sentences may appear in two splits by chance (most
likely among the shortest ones: there are only 28**3 three-word sentences).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from seq2seq.errors import UserError
from seq2seq.files import atomic_write_text

LEXICON_SIZE = 28
_LEXICON_SEED = 20150817  # fixed forever: changing it changes every toy corpus
_SRC_CONSONANTS = "bdgklmnprstv"
_SRC_VOWELS = "aeiou"
_TGT_CONSONANTS = "cfhjqwxyz"
_TGT_VOWELS = "aeiou"
MIN_WORDS = 3


def _words(rng: random.Random, consonants: str, vowels: str, count: int) -> list[str]:
    """`count` distinct words of two or three consonant-vowel syllables."""
    words: list[str] = []
    while len(words) < count:
        syllables = rng.choice((2, 2, 3))
        word = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables))
        if word not in words:
            words.append(word)
    return words


def _build_lexicon() -> dict[str, str]:
    rng = random.Random(_LEXICON_SEED)
    source = _words(rng, _SRC_CONSONANTS, _SRC_VOWELS, LEXICON_SIZE)
    target = [w.capitalize() for w in _words(rng, _TGT_CONSONANTS, _TGT_VOWELS, LEXICON_SIZE)]
    return dict(zip(source, target, strict=True))


# The fixed source-word -> target-word mapping, read-only, in a stable order.
LEXICON: Mapping[str, str] = MappingProxyType(_build_lexicon())


def translate(sentence: str) -> str:
    """The reference translation of a toy source sentence."""
    return " ".join(LEXICON[word] for word in reversed(sentence.split(" ")))


def gold_alignment(sentence: str) -> str:
    """The word alignment of a toy source sentence and its translation, in Pharaoh format:
    target word j translates source word n - 1 - j, every link sure."""
    n = len(sentence.split(" "))
    return " ".join(f"{n - 1 - j}-{j}" for j in range(n))


def _sentences(seed: int, split: str, count: int, max_words: int) -> list[str]:
    # A string seed is hashed with SHA-512 by `random`, so it is stable across processes
    # (unlike hash()) and gives each split an independent stream.
    rng = random.Random(f"toy:{split}:{seed}")
    words = list(LEXICON)
    return [
        " ".join(rng.choice(words) for _ in range(rng.randint(MIN_WORDS, max_words)))
        for _ in range(count)
    ]


def make_toy_corpus(
    out_dir: Path,
    seed: int = 1,
    train: int = 20000,
    valid: int = 300,
    test: int = 300,
    max_words: int = 16,
) -> None:
    """Write `out_dir/{train,valid,test}.{src,tgt}` and each split's gold word alignments,
    `.align`; the same arguments give identical bytes."""
    if max_words < MIN_WORDS:
        raise UserError(f"max_words is {max_words}; it must be at least {MIN_WORDS}")
    for name, count in (("train", train), ("valid", valid), ("test", test)):
        if count < 1:
            raise UserError(f"the {name} split size is {count}; it must be at least 1")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", train), ("valid", valid), ("test", test)):
        src = _sentences(seed, split, count, max_words)
        atomic_write_text(out_dir / f"{split}.src", "".join(line + "\n" for line in src))
        targets = "".join(translate(line) + "\n" for line in src)
        atomic_write_text(out_dir / f"{split}.tgt", targets)
        links = "".join(gold_alignment(line) + "\n" for line in src)
        atomic_write_text(out_dir / f"{split}.align", links)
