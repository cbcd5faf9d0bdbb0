"""scripts/make_noisy_corpus.py: a corpus with known noise, on a tiny fake Multi30k."""

from __future__ import annotations

import gzip
import random
import re
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

VOCAB = {
    "de": "der die das hund katze mann frau kind läuft sitzt spielt im park auf einer wiese",
    "en": "the a dog cat man woman child runs sits plays in park on meadow green small",
    "fr": "le la un une chien chat homme femme enfant court joue dans parc sur pelouse",
    "cs": "pes kočka muž žena dítě běží sedí hraje v parku na louce malý velký zelený",
}
KINDS = ("copy", "swapped", "wrong_language", "misaligned", "duplicate", "junk", "length")


def spell(i: int) -> str:
    """A word that differs for each i, of letters only (normalize makes every digit 0)."""
    return "".join("bcdfghjklm"[int(d)] for d in str(i))


def make_multi30k(root: Path, n: int = 200) -> dict[str, list[str]]:
    """DIR/train.{de,en,fr,cs} of n aligned lines of 3 to 12 words (de and fr gzipped)."""
    rng = random.Random(0)
    columns: dict[str, list[str]] = {lang: [] for lang in VOCAB}
    for i in range(n):
        length = 3 + i % 10
        for lang, vocab in VOCAB.items():
            words = [rng.choice(vocab.split()) for _ in range(length - 1)]
            columns[lang].append(" ".join([*words, spell(i)]).capitalize() + ".")
    root.mkdir(parents=True, exist_ok=True)
    for lang, lines in columns.items():
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        if lang in ("de", "fr"):
            (root / f"train.{lang}.gz").write_bytes(gzip.compress(data, mtime=0))
        else:
            (root / f"train.{lang}").write_bytes(data)
    return columns


def run(script: ModuleType, source: Path, out: Path, *options: str) -> dict[str, list[str]]:
    assert script.main(["--from", str(source), "--out", str(out), *options]) == 0
    return {
        suffix: Path(f"{out}.{suffix}").read_text(encoding="utf-8").split("\n")[:-1]
        for suffix in ("de", "en", "labels")
    }


@pytest.fixture
def script(load_script) -> ModuleType:
    return load_script("make_noisy_corpus")


@pytest.fixture
def multi30k(tmp_path: Path) -> tuple[Path, dict[str, list[str]]]:
    return tmp_path / "multi30k", make_multi30k(tmp_path / "multi30k")


def test_writes_aligned_files_with_the_requested_share_of_each_kind(
    script, multi30k, tmp_path, capsys
):
    source, _ = multi30k
    out = run(script, source, tmp_path / "out" / "train")
    assert len(out["de"]) == len(out["en"]) == len(out["labels"]) == 200
    counts = Counter(out["labels"])
    assert set(counts) == {"clean", *KINDS}
    assert counts["clean"] == 140  # 30% of 200 noisy
    assert all(8 <= counts[kind] <= 9 for kind in KINDS), counts
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "train.de",
        "train.en",
        "train.labels",
    ]
    printed = capsys.readouterr().out
    assert re.search(r"clean\s+140", printed) and re.search(r"junk\s+[89]\b", printed)


def test_each_kind_is_what_it_claims(script, multi30k, tmp_path):
    source, given = multi30k
    out = run(script, source, tmp_path / "train", "--noise", "0.5", "--seed", "7")
    de_index = {line: i for i, line in enumerate(given["de"])}
    en_index = {line: i for i, line in enumerate(given["en"])}
    earlier: list[tuple[str, str]] = []
    for de, en, label in zip(out["de"], out["en"], out["labels"], strict=True):
        if label == "clean":
            assert en_index[en] == de_index[de]
        elif label == "copy":
            assert de == en and en in en_index
        elif label == "swapped":
            assert en_index[de] == de_index[en]
        elif label == "wrong_language":
            assert de in given["fr"] or de in given["cs"]
            assert en in en_index and de not in de_index
        elif label == "misaligned":
            assert en_index[en] != de_index[de]
        elif label == "duplicate":
            assert (script.normalize(de), script.normalize(en)) in earlier
        elif label == "length":
            short, long = sorted((len(de.split()), len(en.split())))
            assert short <= 2 and long > 4 * short
        else:
            assert label == "junk"
            assert any(is_junk(side) for side in (de, en)), (de, en)
        earlier.append((script.normalize(de), script.normalize(en)))


def is_junk(text: str) -> bool:
    return bool(
        re.fullmatch(r"https?://\S+", text)
        or re.search(r"</?p>|<br/?>", text)
        or re.search(r"[\x00-\x08\x0e-\x1f\x7f]", text)
        or re.search(r"(.)\1{19}", text)
        or not re.search(r"[^\W\d_]", text)
    )


def test_same_seed_same_bytes_other_seed_differs(script, multi30k, tmp_path):
    source, _ = multi30k

    def files(name: str, seed: str) -> list[bytes]:
        run(script, source, tmp_path / name / "train", "--seed", seed)
        return [(tmp_path / name / f"train.{s}").read_bytes() for s in ("de", "en", "labels")]

    assert files("a", "3") == files("b", "3")
    assert files("c", "4") != files("a", "3")


def test_input_pairs_that_already_look_noisy_are_left_out(script, tmp_path):
    given = make_multi30k(tmp_path / "multi30k", n=100)
    given["de"][50] = given["de"][10].upper()  # a near-duplicate German side
    given["de"][60] = "@@"  # no letters
    given["en"][70] = given["en"][70] + " \x07"  # a control character
    for lang, lines in given.items():
        (tmp_path / "multi30k" / f"train.{lang}.gz").unlink(missing_ok=True)
        (tmp_path / "multi30k" / f"train.{lang}").write_text("\n".join(lines) + "\n")
    out = run(script, tmp_path / "multi30k", tmp_path / "train", "--noise", "0")
    assert out["labels"] == ["clean"] * 97
    assert out["de"] == [line for i, line in enumerate(given["de"]) if i not in (50, 60, 70)]


def test_bad_input_is_an_error_and_writes_nothing(script, multi30k, tmp_path, capsys):
    source, _ = multi30k
    out = tmp_path / "out" / "train"
    assert script.main(["--from", str(source), "--out", str(out), "--noise", "1.5"]) == 2
    (source / "train.cs").write_text("just one line\n")
    assert script.main(["--from", str(source), "--out", str(out)]) == 2
    assert "differ in length" in capsys.readouterr().err
    assert not out.parent.exists() or not any(out.parent.iterdir())
