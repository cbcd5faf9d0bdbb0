"""Write a German-English parallel corpus with known noise, made from Multi30k's training pairs.

    python scripts/make_noisy_corpus.py --from data/multi30k --out data/noisy/train

reads DIR/train.{de,en,fr,cs}[.gz] (line-aligned) and writes PREFIX.de, PREFIX.en (one pair a
line, UTF-8) and PREFIX.labels: `clean` or the kind of noise that pair was given. A share of
the pairs (--noise) gets noise, in equal parts of each kind of `KINDS`; the same --seed writes
the same bytes. A corpus-cleaning filter run on PREFIX.de/.en can then be scored by precision
and recall against PREFIX.labels, overall and for each kind.

So that `clean` means clean, input pairs that already look like noise are left out: a pair
whose German or English side normalizes (`normalize`) to that of an earlier pair, a side
without letters, a control or format character, or a length ratio above 4 (in words). Only
the second and later occurrences of a duplicate are labelled `duplicate`; the first is clean.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import os
import random
import string
import sys
import tempfile
import unicodedata
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

LANGS = ("de", "en", "fr", "cs")
MAX_RATIO = 4  # a pair whose longer side has more than 4 times the words of the other is noise
# Control characters that no line splitter (str.splitlines included) takes for a line break.
CONTROL = "".join(map(chr, [*range(0x01, 0x09), *range(0x0E, 0x1C), 0x7F]))


class Pair(NamedTuple):
    """One input pair, with the French and Czech sentences of the same image."""

    de: str
    en: str
    fr: str
    cs: str


class Context(NamedTuple):
    """What a noise function may read: the pairs, the positions of each kind (in a random
    order), the clean positions (ascending) and the random number generator."""

    pairs: list[Pair]
    groups: dict[str, list[int]]
    clean: list[int]
    rng: random.Random


class Kind(NamedTuple):
    """A kind of noise: `make(position, context)` gives the (de, en) written at a position
    drawn for this kind; `eligible(pair)` says which positions may be drawn (None: all)."""

    make: Callable[[int, Context], tuple[str, str]]
    eligible: Callable[[Pair], bool] | None = None


def normalize(text: str) -> str:
    """The text as a near-duplicate check compares it: NFKC, case-folded, every digit 0,
    punctuation as spaces, whitespace runs as one space, no space at the ends."""
    text = unicodedata.normalize("NFKC", text).casefold()
    chars = [
        "0" if ch.isdecimal() else " " if unicodedata.category(ch).startswith("P") else ch
        for ch in text
    ]
    return " ".join("".join(chars).split())


def words(text: str) -> int:
    return len(text.split())


def ratio_too_high(de: str, en: str) -> bool:
    return max(words(de), words(en)) > MAX_RATIO * max(1, min(words(de), words(en)))


def random_word(rng: random.Random, low: int = 4, high: int = 10) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(low, high)))


# ---- noise kinds ------------------------------------------------------------------------


def copy_source(i: int, ctx: Context) -> tuple[str, str]:
    """The English side copied to the German side."""
    en = ctx.pairs[i].en
    return en, en


def swap_sides(i: int, ctx: Context) -> tuple[str, str]:
    """German on the English side and English on the German side."""
    pair = ctx.pairs[i]
    return pair.en, pair.de


def wrong_language(i: int, ctx: Context) -> tuple[str, str]:
    """The German side replaced by the French or Czech sentence of the same pair."""
    pair = ctx.pairs[i]
    return ctx.rng.choice((pair.fr, pair.cs)), pair.en


def misalign(i: int, ctx: Context) -> tuple[str, str]:
    """The English side of another pair of this kind (the next in the drawn order, so each
    English sentence is still written once); with no other, of any other pair."""
    group = ctx.groups["misaligned"]
    if len(group) > 1:
        donor = group[(group.index(i) + 1) % len(group)]
    else:
        donor = ctx.rng.choice([j for j in range(len(ctx.pairs)) if j != i])
    return ctx.pairs[i].de, ctx.pairs[donor].en


def duplicate(i: int, ctx: Context) -> tuple[str, str]:
    """An exact or near copy (case, digits, punctuation or spaces changed) of an earlier
    clean pair: the same text once normalized."""
    earlier = bisect.bisect_left(ctx.clean, i)  # at least 1: position 0 is always clean
    source = ctx.pairs[ctx.clean[ctx.rng.randrange(earlier)]]
    change = NEAR_COPIES[ctx.rng.choice(sorted(NEAR_COPIES))]
    de, en = change(source.de, ctx.rng), change(source.en, ctx.rng)
    if (normalize(de), normalize(en)) != (normalize(source.de), normalize(source.en)):
        return source.de, source.en  # a change normalize would tell apart: the exact copy
    return de, en


def junk(i: int, ctx: Context) -> tuple[str, str]:
    """One side made clearly junk (see JUNK)."""
    pair = ctx.pairs[i]
    spoil = JUNK[ctx.rng.choice(sorted(JUNK))]
    if ctx.rng.random() < 0.5:
        return spoil(pair.de, ctx.rng), pair.en
    return pair.de, spoil(pair.en, ctx.rng)


def long_enough(pair: Pair) -> bool:
    """Truncating the other side to two words leaves a length ratio above MAX_RATIO."""
    return max(words(pair.de), words(pair.en)) > 2 * MAX_RATIO


def truncate(i: int, ctx: Context) -> tuple[str, str]:
    """One side cut to its first one or two words while the other is long (ratio > 4)."""
    pair = ctx.pairs[i]
    keep = ctx.rng.choice((1, 2))
    other = {"de": pair.en, "en": pair.de}
    side = ctx.rng.choice([s for s in ("de", "en") if words(other[s]) > MAX_RATIO * keep])
    if side == "de":
        return " ".join(pair.de.split()[:keep]), pair.en
    return pair.de, " ".join(pair.en.split()[:keep])


KINDS: dict[str, Kind] = {
    "copy": Kind(copy_source),
    "swapped": Kind(swap_sides),
    "wrong_language": Kind(wrong_language),
    "misaligned": Kind(misalign),
    "duplicate": Kind(duplicate),
    "junk": Kind(junk),
    "length": Kind(truncate, long_enough),
}


# ---- near copies (duplicate) and junk ---------------------------------------------------


def change_case(text: str, rng: random.Random) -> str:
    return rng.choice((str.lower, str.upper, str.swapcase))(text)


def change_digits(text: str, rng: random.Random) -> str:
    """Every digit another one; a text without digits gets punctuation changes instead."""
    if not any(ch.isdecimal() for ch in text):
        return change_punctuation(text, rng)
    return "".join(rng.choice(string.digits) if ch.isdecimal() else ch for ch in text)


def change_punctuation(text: str, rng: random.Random) -> str:
    """The final full stop dropped (or one added), and a space doubled or put before a comma."""
    text = text[:-1] if text.endswith(".") else text + "."
    if "," in text and rng.random() < 0.5:
        return text.replace(",", " ,", 1)
    spaces = [k for k, ch in enumerate(text) if ch == " "]
    if not spaces:
        return " " + text
    k = rng.choice(spaces)
    return text[:k] + "  " + text[k + 1 :]


NEAR_COPIES: dict[str, Callable[[str, random.Random], str]] = {
    "exact": lambda text, rng: text,
    "case": change_case,
    "digits": change_digits,
    "punctuation": change_punctuation,
}


def url(text: str, rng: random.Random) -> str:
    """A URL alone."""
    tld = rng.choice(("com", "de", "org", "net", "info"))
    return f"https://www.{random_word(rng)}.{tld}/{random_word(rng)}/{rng.randint(1, 9999)}.html"


def html(text: str, rng: random.Random) -> str:
    """The text wrapped in <p>...</p>, or with a <br> inside."""
    parts = text.split(" ")
    if len(parts) < 2 or rng.random() < 0.5:
        return f"<p>{text}</p>"
    k = rng.randint(1, len(parts) - 1)
    return " ".join(parts[:k]) + rng.choice((" <br> ", "<br>", " <br/> ")) + " ".join(parts[k:])


def control(text: str, rng: random.Random) -> str:
    """One to three control characters inserted."""
    for _ in range(rng.randint(1, 3)):
        k = rng.randint(0, len(text))
        text = text[:k] + rng.choice(CONTROL) + text[k:]
    return text


def repeat(text: str, rng: random.Random) -> str:
    """A character repeated 20 to 40 times, at the end or replacing the text."""
    run = rng.choice("!?.-=*_#@xa") * rng.randint(20, 40)
    return run if rng.random() < 0.3 else f"{text} {run}"


def symbols(text: str, rng: random.Random) -> str:
    """Digits and punctuation only."""
    pieces = [
        str(rng.randint(0, 99999)) if rng.random() < 0.6 else rng.choice(("--", "...", "/", "%"))
        for _ in range(rng.randint(4, 10))
    ]
    return " ".join(pieces)


JUNK: dict[str, Callable[[str, random.Random], str]] = {
    "url": url,
    "html": html,
    "control": control,
    "repeat": repeat,
    "symbols": symbols,
}


# ---- reading, choosing, writing ---------------------------------------------------------


def read_lines(directory: Path, lang: str) -> list[str]:
    """DIR/train.LANG, or DIR/train.LANG.gz: its lines, without line ends."""
    path = directory / f"train.{lang}"
    if not path.exists() and path.with_name(path.name + ".gz").exists():
        path = path.with_name(path.name + ".gz")
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read {path} (or {path}.gz): {error}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def read_pairs(directory: Path) -> list[Pair]:
    columns = {lang: read_lines(directory, lang) for lang in LANGS}
    counts = {lang: len(lines) for lang, lines in columns.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(f"the train files of {directory} differ in length: {counts}")
    return [Pair(*lines) for lines in zip(*columns.values(), strict=True)]


def looks_noisy(pair: Pair) -> bool:
    """A side without letters or with control or format characters, or too high a ratio."""
    for text in pair:
        if not any(ch.isalpha() for ch in text):
            return True
        if any(unicodedata.category(ch) in ("Cc", "Cf") for ch in text):
            return True
    return ratio_too_high(pair.de, pair.en)


def clean_pool(pairs: list[Pair]) -> list[Pair]:
    """The pairs that do not look like noise and whose German and English sides both
    normalize differently from every earlier kept pair's."""
    seen_de: set[str] = set()
    seen_en: set[str] = set()
    kept = []
    for pair in pairs:
        de, en = normalize(pair.de), normalize(pair.en)
        if looks_noisy(pair) or de in seen_de or en in seen_en:
            continue
        seen_de.add(de)
        seen_en.add(en)
        kept.append(pair)
    return kept


def draw_labels(pairs: list[Pair], noise: float, rng: random.Random) -> list[str]:
    """Each position's label: round(noise * n) positions (never the first) get noise, split
    as evenly as can be over KINDS (the first kinds get the remainder)."""
    n = len(pairs)
    total = round(noise * n)
    if not 0 <= noise <= 1 or total > n - 1:
        raise ValueError(f"--noise {noise}: give a share from 0 to {(n - 1) / n:.4f}")
    base, extra = divmod(total, len(KINDS))
    order = list(range(1, n))
    rng.shuffle(order)
    labels = ["clean"] * n
    for k, (name, kind) in enumerate(KINDS.items()):
        quota = base + (k < extra)
        for i in order:
            if quota == 0:
                break
            if labels[i] == "clean" and (kind.eligible is None or kind.eligible(pairs[i])):
                labels[i] = name
                quota -= 1
        if quota:
            raise ValueError(f"too few pairs can take the noise {name!r} at --noise {noise}")
    return labels


def make_corpus(pairs: list[Pair], noise: float, seed: int) -> tuple[list[str], ...]:
    """The German lines, English lines and labels of the noisy corpus."""
    rng = random.Random(seed)
    labels = draw_labels(pairs, noise, rng)
    groups: dict[str, list[int]] = {name: [] for name in KINDS}
    for i, label in enumerate(labels):
        if label != "clean":
            groups[label].append(i)
    for group in groups.values():
        rng.shuffle(group)  # so that the next in a group is a random other position
    clean = [i for i, label in enumerate(labels) if label == "clean"]
    ctx = Context(pairs, groups, clean, rng)
    de_lines, en_lines = [], []
    for i, (pair, label) in enumerate(zip(pairs, labels, strict=True)):
        de, en = (pair.de, pair.en) if label == "clean" else KINDS[label].make(i, ctx)
        de_lines.append(de)
        en_lines.append(en)
    return de_lines, en_lines, labels


def write_files(prefix: Path, columns: dict[str, list[str]]) -> None:
    """PREFIX.SUFFIX for each column, each written to a temporary name first and all renamed
    only once every one is written."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    temporary: dict[str, str] = {}
    try:
        for suffix, lines in columns.items():
            if any(ch in line for line in lines for ch in "\n\r"):
                raise ValueError(f"a {suffix} line holds a line break")
            fd, name = tempfile.mkstemp(dir=prefix.parent, prefix=f".{prefix.name}.{suffix}.")
            temporary[suffix] = name
            with open(fd, "w", encoding="utf-8", newline="\n") as out:
                out.writelines(line + "\n" for line in lines)
            os.chmod(name, 0o644)
        for suffix, name in temporary.items():
            os.replace(name, f"{prefix}.{suffix}")
    finally:
        for name in temporary.values():
            if os.path.exists(name):
                os.unlink(name)


def summary(read: int, labels: list[str], prefix: Path) -> str:
    counts = Counter(labels)
    n = len(labels)
    lines = [
        f"{read} input pairs, {read - n} left out as already noisy or near-duplicate, "
        f"{n} written to {prefix}.de, {prefix}.en, {prefix}.labels"
    ]
    for name in ("clean", *KINDS):
        lines.append(f"  {name:<15} {counts[name]:>6}  {counts[name] / max(n, 1):6.1%}")
    noisy = n - counts["clean"]
    lines.append(f"  {'(all noise)':<15} {noisy:>6}  {noisy / max(n, 1):6.1%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--from", dest="source", type=Path, required=True, help="Multi30k dir")
    parser.add_argument("--out", type=Path, required=True, help="output prefix")
    parser.add_argument("--seed", type=int, default=1, help="chooses the noise")
    parser.add_argument("--noise", type=float, default=0.3, help="share of noisy pairs")
    args = parser.parse_args(argv)
    try:
        pairs = read_pairs(args.source)
        pool = clean_pool(pairs)
        de_lines, en_lines, labels = make_corpus(pool, args.noise, args.seed)
        write_files(args.out, {"de": de_lines, "en": en_lines, "labels": labels})
    except (ValueError, OSError) as error:
        print(f"make_noisy_corpus: {error}", file=sys.stderr)
        return 2
    print(summary(len(pairs), labels, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
