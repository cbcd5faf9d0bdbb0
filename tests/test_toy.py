from __future__ import annotations

from pathlib import Path

import pytest

from seq2seq.data.toy import LEXICON, LEXICON_SIZE, make_toy_corpus, translate
from seq2seq.errors import UserError

SIDES = ("src", "tgt", "align")
FILES = [f"{split}.{side}" for split in ("train", "valid", "test") for side in SIDES]
SIZES = {"train": 400, "valid": 30, "test": 20}


def make(out: Path, seed: int = 1, max_words: int = 16) -> dict[str, list[str]]:
    make_toy_corpus(out, seed=seed, max_words=max_words, **SIZES)
    return {name: (out / name).read_text(encoding="utf-8").splitlines() for name in FILES}


def test_same_seed_gives_identical_bytes(tmp_path: Path) -> None:
    make(tmp_path / "a")
    make(tmp_path / "b")
    for name in FILES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(FILES)  # no temp files


def test_other_seed_gives_other_sentences_but_the_same_lexicon(tmp_path: Path) -> None:
    one, two = make(tmp_path / "a", seed=1), make(tmp_path / "b", seed=2)
    assert one["train.src"] != two["train.src"]
    words_one = {w for line in one["train.src"] for w in line.split()}
    words_two = {w for line in two["train.src"] for w in line.split()}
    assert words_one == words_two == set(LEXICON)


def test_target_is_the_reversed_word_by_word_translation_and_aligned_so(tmp_path: Path) -> None:
    data = make(tmp_path)
    for split in SIZES:
        lines = (data[f"{split}.{side}"] for side in SIDES)
        for src, tgt, links in zip(*lines, strict=True):
            assert tgt.split(" ") == [LEXICON[w] for w in src.split(" ")][::-1]
            assert translate(src) == tgt
            pairs = [link.split("-") for link in links.split(" ")]
            words, targets = src.split(" "), tgt.split(" ")
            assert sorted(int(j) for _, j in pairs) == list(range(len(targets)))
            assert all(LEXICON[words[int(i)]] == targets[int(j)] for i, j in pairs)


def test_line_and_word_counts(tmp_path: Path) -> None:
    data = make(tmp_path, max_words=7)
    for split, n in SIZES.items():
        assert len(data[f"{split}.src"]) == len(data[f"{split}.tgt"]) == n
    lengths = {len(line.split(" ")) for line in data["train.src"]}
    assert lengths == set(range(3, 8))  # every allowed length occurs, and no other


def test_splits_are_drawn_independently(tmp_path: Path) -> None:
    data = make(tmp_path)
    assert data["test.src"] != data["train.src"][: SIZES["test"]]
    assert not set(data["test.src"]) <= set(data["train.src"])


def test_lexicon_is_one_to_one_between_distinct_word_sets() -> None:
    assert len(LEXICON) == LEXICON_SIZE == len(set(LEXICON.values()))
    assert all(w.islower() and w.isalpha() for w in LEXICON)
    assert all(w[0].isupper() and w[1:].islower() for w in LEXICON.values())


@pytest.mark.parametrize(
    "kwargs", [{"max_words": 2}, {"train": 0}, {"valid": -1}, {"test": 0}], ids=str
)
def test_bad_arguments_are_user_errors(tmp_path: Path, kwargs) -> None:
    with pytest.raises(UserError):
        make_toy_corpus(tmp_path, **kwargs)


def test_script_writes_the_corpus_and_a_summary(load_script, tmp_path: Path, capsys) -> None:
    script = load_script("make_toy_data")
    argv = ["--out", str(tmp_path), "--train", "12", "--valid", "3", "--test", "4"]
    assert script.main([*argv, "--max-words", "5", "--seed", "9"]) == 0
    assert len((tmp_path / "train.tgt").read_text().splitlines()) == 12
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "train 12" in out
    assert script.main([*argv, "--max-words", "1"]) == 2
    assert "max_words" in capsys.readouterr().err
