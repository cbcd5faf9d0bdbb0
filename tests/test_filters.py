"""Each cleaning filter drops the crafted pairs it is for and keeps clean ones; a pair
counts for the first filter that drops it; the report says what was dropped and why."""

from __future__ import annotations

import pytest

from seq2seq.config.filters import FiltersConfig
from seq2seq.data.cleaning import Cleaner, clean_chunks
from seq2seq.data.cleaning_report import CleaningReport
from seq2seq.data.corpus import PairChunk

LANGS = ("de", "en")
CLEAN = [
    ("Ein Mann fährt mit dem Fahrrad durch die Stadt.", "A man rides his bike through the city."),
    ("Zwei Kinder spielen im Park mit einem Ball.", "Two children play with a ball in the park."),
    ("Eine Frau liest ein Buch im Café, 3 < 4.", "A woman reads a book in the café, 3 < 4."),
]


def cleaned(settings: FiltersConfig, pairs, chunks: int = 1) -> tuple[list, CleaningReport]:
    """The pairs kept by `settings` (read in `chunks` chunks), and the report."""
    cleaner = Cleaner(settings, LANGS, print)
    report = CleaningReport("test", {}, 0, dict.fromkeys(cleaner.names, 0))
    size = -(-len(pairs) // chunks)
    parts = [pairs[i : i + size] for i in range(0, len(pairs), size)]
    read = [PairChunk([s for s, _ in part], [t for _, t in part], 0) for part in parts]
    kept = [
        pair
        for chunk in clean_chunks(read, cleaner, report, None)
        for pair in zip(chunk.src, chunk.tgt, strict=True)
    ]
    return kept, report


def only(**filters) -> FiltersConfig:
    return FiltersConfig(**filters)


BAD = {
    "length": [
        ("Ja.", "Yes, of course, and the rest of a long sentence that was never translated."),
        ("x" * 1001, "x" * 1001),
    ],
    "junk": [
        ("Ein Hund\x07 bellt.", "A dog barks."),
        ("<p>Ein Hund bellt.</p>", "A dog barks."),
        ("https://example.com/a/b?c=d", "A dog barks."),
        ("Ein Hund bellt.", " someone@example.org "),
    ],
    "characters": [
        ("Мужчина едет на велосипеде.", "A man rides a bike."),  # Cyrillic as German
        ("12345 67890 !!! ??? 2024-01-01 %%%", "A number."),
        ("Ein Hund bellt!!!!!!!!!!!!!!!!", "A dog barks!"),
    ],
    "identical": [
        ("A man rides a bike.", "a man rides a bike!"),
        ("Version 2.1", "version 3.0"),
    ],
    "language": [
        ("Un homme fait du vélo dans la ville.", "A man rides his bike through the city."),
        ("Ein Mann fährt Fahrrad.", "Ein Mann fährt mit dem Fahrrad durch die Stadt."),
    ],
}


@pytest.mark.parametrize("name", BAD)
def test_each_filter_drops_what_it_is_for_and_keeps_clean_pairs(name):
    settings = FiltersConfig.recommended()
    if name == "language":
        pytest.importorskip("py3langid", reason="the clean extra is not installed")
        pytest.importorskip("pycld2", reason="the clean extra is not installed")
    else:
        settings = only(**{name: getattr(settings, name)})
    kept, report = cleaned(settings, CLEAN + BAD[name])
    assert kept == CLEAN
    assert report.dropped[name] == len(BAD[name]) and report.examples[name] == BAD[name]
    assert cleaned(FiltersConfig(), CLEAN + BAD[name])[0] == CLEAN + BAD[name]  # without it


def test_duplicates_keep_the_first_of_pairs_the_same_once_folded_across_chunks():
    pairs = CLEAN + [
        (
            "Ein Mann fährt mit dem Fahrrad durch die Stadt!",
            "a man rides his bike through the city",
        ),
        (
            "Zwei Kinder spielen im Park mit einem Ball.",
            "Two children play with a ball in the park.",
        ),
        (
            "Zwei Kinder spielen im Park mit einem Ball.",
            "Two kids play with a ball.",
        ),  # not the same
        ("Ein Jahr: 1999.", "One year: 1999."),
        ("Ein Jahr: 2001.", "One year: 2001."),  # digits fold
    ]
    for chunks in (1, 3, 8):
        kept, report = cleaned(only(duplicates=True), pairs, chunks)
        assert kept == CLEAN + [pairs[5], pairs[6]]
        assert report.dropped["duplicates"] == 3 and report.kept == 5


def test_a_pair_counts_for_the_first_filter_that_drops_it():
    junk_twice = ("<b>Ein Hund bellt.</b>", "<b>Ein Hund bellt.</b>")  # junk, then identical
    kept, report = cleaned(only(junk=True, identical=True, duplicates=True), [junk_twice] * 3)
    assert kept == [] and report.dropped == {"empty": 0, "junk": 3, "identical": 0, "duplicates": 0}


def test_normalisation_rewrites_the_text_before_the_filters():
    pairs = [
        ("Ｅｉｎ Ｈｕｎｄ «bellt»", "A dog \u201cbarks\u201d"),
        ("Ein Hund «bellt»", 'A dog "barks"'),
    ]
    kept, _ = cleaned(only(normalize=["nfkc"]), pairs[:1])
    assert kept == [("Ein Hund «bellt»", "A dog \u201cbarks\u201d")]
    pytest.importorskip("sacremoses", reason="the clean extra is not installed")
    kept, report = cleaned(only(normalize=["nfkc", "moses"], duplicates=True), pairs)
    assert kept == [('Ein Hund "bellt"', 'A dog "barks"')] and report.dropped["duplicates"] == 1


def test_a_language_the_filters_do_not_know_is_a_warning_and_left_unchecked():
    pytest.importorskip("py3langid", reason="the clean extra is not installed")
    warnings: list[str] = []
    cleaner = Cleaner(FiltersConfig.recommended(), ("de", "tlh"), warnings.append)
    assert [w.split(":")[0] for w in warnings] == [
        "the characters filter knows no script of tlh",
        "the language filter does not know tlh",
    ]
    assert len(cleaner.checks) == 5


def test_the_report_counts_every_pair_and_shows_at_most_twenty_of_each_filter():
    pairs = [(f"<i>{i}</i> Hund", f"dog {i}") for i in range(30)] + CLEAN
    chunk = PairChunk([s for s, _ in pairs], [t for _, t in pairs], empty=4)
    cleaner = Cleaner(only(junk=True), LANGS, print)
    report = CleaningReport("c", {}, 0, dict.fromkeys(cleaner.names, 0))
    list(clean_chunks([chunk], cleaner, report, None))
    assert (report.pairs, report.kept) == (37, 3)
    assert report.dropped == {"empty": 4, "junk": 30} and len(report.examples["junk"]) == 20
    assert report.to_dict()["summary"] == "c: kept 3 of 37 pairs (8.1%); dropped: empty 4, junk 30"
