"""The filters that clean a training corpus (`data.filters`), one entry each in `FILTERS`,
in the order a pair meets them: a pair dropped counts for the first that drops it.

A filter's `build(settings, langs, warn)` gives its check, `drops(src, tgt) -> bool`, or
None where its settings leave nothing to check. Checks see the text after `normalize`.
`duplicates` remembers what it kept, so it runs last and in the corpus's order
(cleaning.py), on keys made on any core; the others run on any core, in any order.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import regex

from seq2seq.config.filters import (
    CharactersFilter,
    FiltersConfig,
    LanguageFilter,
    LengthFilter,
)
from seq2seq.data.language_id import (
    LanguageIdentifier,
    Script,
    language_script,
    missing_library,
)

Langs = tuple[str, str]
Check = Callable[[str, str], bool]
Warn = Callable[[str], None]

_LENGTH_SLACK = 5  # added to both sides' characters before their ratio is taken
# Patterns without Unicode classes use the standard `re`: 1.5 to 3 times faster here.
_CONTROL_OR_TAG = re.compile(
    r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>"
)
_ADDRESS_ONLY = re.compile(r"\s*(?:(?:https?|ftp)://\S+|www\.\S+|[\w.+-]+@[\w-]+\.[\w.]+)\s*")
_NOT_LETTER = regex.compile(r"[^\p{L}\p{M}]+")
_PUNCTUATION = regex.compile(r"[\p{P}\p{S}]+")
_DIGIT = regex.compile(r"\p{Nd}")


@dataclass(frozen=True)
class Filter:
    name: str  # its field of FiltersConfig, and its name in reports
    build: Callable[[Any, Langs, Warn], Any]  # its check, or None: nothing to check
    # A check that remembers pairs (SeenPairs): `key` on any core, `drops` in order, last.
    in_order: bool = False


@functools.lru_cache(maxsize=1 << 14)  # `identical` then `duplicates` fold the same texts
def folded(text: str) -> str:
    """The text as `identical` and `duplicates` compare it: NFKC, case folded, every digit
    0, punctuation and symbols as spaces, spaces squeezed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_DIGIT.sub("0", _PUNCTUATION.sub(" ", text)).split())


def _length(settings: LengthFilter, langs: Langs, warn: Warn) -> Check:
    longest, ratio = settings.max_chars, settings.max_ratio

    def drops(src: str, tgt: str) -> bool:
        short, long = sorted((len(src), len(tgt)))
        if long > longest:
            return True
        return ratio is not None and long + _LENGTH_SLACK > ratio * (short + _LENGTH_SLACK)

    return drops


def _junk(on: bool, langs: Langs, warn: Warn) -> Check | None:
    def junk(text: str) -> bool:
        return bool(_CONTROL_OR_TAG.search(text) or _ADDRESS_ONLY.fullmatch(text))

    return (lambda src, tgt: junk(src) or junk(tgt)) if on else None


def _characters(settings: CharactersFilter, langs: Langs, warn: Warn) -> Check:
    scripts = [
        None if settings.min_script_share is None else language_script(lang, warn) for lang in langs
    ]
    repeat = None
    if settings.max_repeat is not None:
        repeat = re.compile(rf"(.)\1{{{settings.max_repeat},}}")
    other, share = settings.max_other_share, settings.min_script_share

    def wrong(text: str, script: Script | None) -> bool:
        if repeat is not None and repeat.search(text):
            return True
        letters = _NOT_LETTER.sub("", text)  # and marks: a vowel sign is no punctuation
        spaces = len(text) - len("".join(text.split()))
        if other is not None and len(text) - len(letters) - spaces > other * len(text):
            return True
        if script is None or not letters or (script.ascii and letters.isascii()):
            return False
        return len(script.outside.sub("", letters)) < share * len(letters)

    return lambda src, tgt: wrong(src, scripts[0]) or wrong(tgt, scripts[1])


def _identical(on: bool, langs: Langs, warn: Warn) -> Check | None:
    return (lambda src, tgt: folded(src) == folded(tgt)) if on else None


def _language(settings: LanguageFilter, langs: Langs, warn: Warn) -> Check | None:
    sides = [LanguageIdentifier.for_language(lang, settings.threshold, warn) for lang in langs]
    if sides == [None, None]:
        return None
    src_side, tgt_side = sides
    return lambda src, tgt: bool(
        (src_side and src_side.other(src)) or (tgt_side and tgt_side.other(tgt))
    )


class SeenPairs:
    """`duplicates`: a pair the same as one kept before, folded. `key` (on any core) is the
    64-bit hash of the folded pair; `drops` (in the corpus's order) remembers the keys it
    keeps, in sorted runs merged as they grow: 8 bytes a pair kept."""

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []

    @staticmethod
    def key(src: str, tgt: str) -> int:
        digest = hashlib.blake2b(f"{folded(src)}\t{folded(tgt)}".encode(), digest_size=8)
        return int.from_bytes(digest.digest(), "little", signed=True)

    def drops(self, keys: np.ndarray) -> np.ndarray:
        """Which of `keys` (in order) were seen before; the others are remembered."""
        first = np.zeros(len(keys), bool)
        first[np.unique(keys, return_index=True)[1]] = True
        seen = ~first
        for run in self.runs:
            at = np.minimum(np.searchsorted(run, keys), len(run) - 1)
            seen |= run[at] == keys
        run = np.sort(keys[~seen])
        while self.runs and len(self.runs[-1]) <= len(run):
            run = np.sort(np.concatenate([self.runs.pop(), run]))
        if len(run):
            self.runs.append(run)
        return seen


def _duplicates(on: bool, langs: Langs, warn: Warn) -> SeenPairs | None:
    return SeenPairs() if on else None


# In the order a pair meets them; `empty` (a side without text) is checked as a corpus is
# read, before every other, and always (cleaning_report.EMPTY).
FILTERS = (
    Filter("length", _length),
    Filter("junk", _junk),
    Filter("characters", _characters),
    Filter("identical", _identical),
    Filter("language", _language),
    Filter("duplicates", _duplicates, in_order=True),
)


def checks(settings: FiltersConfig, langs: Langs, warn: Warn, in_order: bool) -> list:
    """(name, check) of each filter `settings` turns on: those run in order, or the rest."""
    found = []
    for entry in FILTERS:
        value = getattr(settings, entry.name)
        if entry.in_order == in_order and value not in (None, False):
            check = entry.build(value, langs, warn)
            if check is not None:
                found.append((entry.name, check))
    return found


def normalizers(names: list[str], langs: Langs) -> Callable[[list[str], int], list[str]] | None:
    """What rewrites the texts of side 0 or 1 (`normalize`: nfkc, moses, in that order);
    None for none."""
    if not names:
        return None
    steps = [[] for _ in langs]
    if "nfkc" in names:
        for side in steps:
            side.append(functools.partial(unicodedata.normalize, "NFKC"))
    if "moses" in names:
        for side, lang in zip(steps, langs, strict=True):
            side.append(_moses(lang).normalize)

    def rewrite(texts: list[str], side: int) -> list[str]:
        for step in steps[side]:
            texts = [step(text) for text in texts]
        return texts

    return rewrite


def _moses(lang: str) -> Any:
    try:
        from sacremoses import MosesPunctNormalizer
    except ImportError:
        raise missing_library("normalize: moses", "sacremoses") from None
    return MosesPunctNormalizer(lang=lang)
