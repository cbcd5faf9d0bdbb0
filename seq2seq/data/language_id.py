"""Which language a text is in, and which script a language is written in: for the
`language` and `characters` filters.

pycld2 (Google's CLD2) screens every text, about 90,000 sentences a second on one core;
a text it does not reliably find to be the expected language goes to py3langid, about 10
times slower and more accurate, which decides. On Multi30k's cs, de, en and fr training
lines (scripts/compare_language_id.py) pycld2 alone drops 0.02-1.1% of clean lines,
py3langid at a threshold of 0.5 at most 0.8%, and it alone would take most of a large
corpus's preparation (docs/benchmarks.md#cleaning-crawled-corpora).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import regex

from seq2seq.errors import UserError

Warn = Callable[[str], None]

# The script each language is written in (a regex Unicode script name); a language not
# here has its script share left unchecked, with a warning.
_SCRIPTS = {
    "Latin": "af ast az br bs ca cs cy da de en eo es et eu fi fil fo fr fy ga gd gl ha hr "
    "ht hu id is it jv ku la lb lt lv mg ms mt nb nl nn no oc pl pt qu ro rw sk sl so sq "
    "sv sw tl tn tr uz vi wa xh yo zu",
    "Cyrillic": "be bg kk ky mk mn ru sr tg tt uk",
    "Greek": "el",
    "Arabic": "ar fa ps sd ug ur",
    "Hebrew": "he iw yi",
    "Han": "zh",
    "Hangul": "ko",
    "Devanagari": "hi mr ne sa",
    "Bengali": "as bn",
    "Thai": "th",
    "Georgian": "ka",
    "Armenian": "hy",
    "Ethiopic": "am",
    "Tamil": "ta",
    "Telugu": "te",
    "Gujarati": "gu",
    "Kannada": "kn",
    "Malayalam": "ml",
    "Gurmukhi": "pa",
    "Sinhala": "si",
    "Khmer": "km",
    "Lao": "lo",
    "Myanmar": "my",
}
# The character classes of each language's letters; Japanese mixes three scripts.
_CLASSES = {"ja": r"\p{Han}\p{Hiragana}\p{Katakana}"}
_CLASSES |= {
    lang: rf"\p{{{script}}}" for script, langs in _SCRIPTS.items() for lang in langs.split()
}


@dataclass(frozen=True)
class Script:
    outside: Any  # the compiled pattern of a run of characters neither of it nor marks
    ascii: bool  # whether it holds the ASCII letters (Latin): ASCII text needs no look


def language_script(lang: str, warn: Warn) -> Script | None:
    """The script of `lang`; None (and a warning) for a language of no known script."""
    base = _base(lang)
    if base not in _CLASSES:
        warn(f"the characters filter knows no script of {lang}: its script share is not checked")
        return None
    outside = regex.compile(rf"[^{_CLASSES[base]}\p{{M}}]+")
    return Script(outside, ascii=outside.search("az") is None)


def _base(lang: str) -> str:
    """`pt_BR`, `zh-Hans` -> `pt`, `zh`: the language, as the libraries name it."""
    return regex.split(r"[-_]", lang.lower())[0]


@functools.cache
def _py3langid() -> Any:
    try:
        from py3langid.langid import MODEL_FILE
        from py3langid.langid import LanguageIdentifier as Identifier
    except ImportError:
        raise missing_library("the language filter", "py3langid") from None
    return Identifier.from_model_file(MODEL_FILE, norm_probs=True)


@functools.cache
def _pycld2() -> Any:
    try:
        import pycld2
    except ImportError:
        raise missing_library("the language filter", "pycld2") from None
    return pycld2


def missing_library(what: str, library: str) -> UserError:
    return UserError(
        f"{what} needs the {library} library: pip install 'seq2seq[clean]' (make install "
        "installs it), or turn it off in data.filters"
    )


class LanguageIdentifier:
    """Whether a text is in another language than `lang` (`other`)."""

    def __init__(self, lang: str, threshold: float) -> None:
        self.lang, self.threshold = lang, threshold
        self.identifier = _py3langid()
        _pycld2()  # missing: one line now, not at the first text

    @classmethod
    def for_language(cls, lang: str, threshold: float, warn: Warn) -> LanguageIdentifier | None:
        """The identifier of `lang`; None (and a warning) for one py3langid does not know."""
        base = _base(lang)
        if base not in _py3langid().nb_classes:
            warn(f"the language filter does not know {lang}: its side is not checked")
            return None
        return cls(base, threshold)

    def other(self, text: str) -> bool:
        """Whether `text` is identified as another language with at least the threshold's
        probability."""
        if _screened(text, self.lang):
            return False
        found, probability = self.identifier.classify(text)
        return found != self.lang and probability >= self.threshold


def _screened(text: str, lang: str) -> bool:
    """Whether pycld2 reliably finds `text` to be in `lang`."""
    pycld2 = _pycld2()
    try:
        reliable, _, details = pycld2.detect(text, isPlainText=True)
    except pycld2.error:  # text it cannot read (a lone surrogate): let py3langid decide
        return False
    return reliable and details[0][1] == lang
