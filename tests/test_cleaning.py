"""Cleaning at prepare: the pairs kept are written once with their report, reused while
the corpus and the filters stay the same, cleaned again when either changes; worker
processes clean as this process does; `prepare --dry-run` writes nothing."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from cli_helpers import run_cli

from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.config.filters import FiltersConfig
from seq2seq.data import cleaning
from seq2seq.data.cleaning import Cleaner, clean_chunks
from seq2seq.data.corpus import PairChunk
from seq2seq.data.training_data import prepare_training_data

WORDS = "Haus Baum Hund Katze Auto Boot Stadt Wald Berg Fluss Tisch Stuhl Brot Buch Ball".split()
EN = "house tree dog cat car boat town forest hill river table chair bread book ball".split()
# 200 pairs that no filter drops: no two the same once digits are folded.
PAIRS = [
    (
        f"Der {WORDS[i % 15]} sieht den {WORDS[i // 15]}.",
        f"The {EN[i % 15]} sees the {EN[i // 15]}.",
    )
    for i in range(200)
]
NOISE = [
    ("der hund sieht den haus!", "the dog sees the house"),  # a near duplicate of PAIRS[2]
    ("<b>fett</b>", "bold"),  # junk
    ("same text", "Same text."),  # identical
]
FILTERS = {"junk": True, "identical": True, "duplicates": True}


def write_corpus(prefix: Path, pairs) -> str:
    for index, side in enumerate(("src", "tgt")):
        Path(f"{prefix}.{side}").write_text("".join(pair[index] + "\n" for pair in pairs))
    return str(prefix)


def prepare(tmp_path: Path, log: logging.Logger, **filters) -> list:
    """The corpora of tmp_path/train, cleaned by `filters` (default FILTERS), prepared."""
    train = str(tmp_path / "train")
    data = DataConfig(src="src", tgt="tgt", train=train, valid=train, filters=filters or FILTERS)
    prepared = prepare_training_data(data, TokenizerConfig(vocab_size=80), tmp_path / "tok", 1, log)
    return prepared.corpora


def test_a_cleaned_corpus_is_written_with_its_report_and_reused_until_a_change(tmp_path, caplog):
    write_corpus(tmp_path / "train", PAIRS + NOISE)
    log = logging.getLogger("test-cleaning")
    with caplog.at_level(logging.INFO, "test-cleaning"):
        (corpus,) = prepare(tmp_path, log)
    assert corpus.pairs == 200
    (report_path,) = (tmp_path / "tok/corpora").glob("*.cleaned-*/report.json")
    report = json.loads(report_path.read_text())
    assert (
        report["dropped"] == {"junk": 1, "identical": 1, "duplicates": 1} and report["kept"] == 200
    )
    assert report["examples"]["junk"] == [["<b>fett</b>", "bold"]]
    assert any("kept 200 of 203 pairs" in r.getMessage() for r in caplog.records)

    caplog.clear()
    with caplog.at_level(logging.INFO, "test-cleaning"):
        prepare(tmp_path, log)  # the same: nothing cleaned or prepared again
    assert not any(r.getMessage().startswith(("cleaning", "preparing")) for r in caplog.records)

    with caplog.at_level(logging.INFO, "test-cleaning"):
        (corpus,) = prepare(tmp_path, log, junk=True)  # other filters: cleaned again
    assert corpus.pairs == 202
    os.utime(tmp_path / "train.src", (1, 1))  # touched, the same content: still reused
    caplog.clear()
    with caplog.at_level(logging.INFO, "test-cleaning"):
        prepare(tmp_path, log, junk=True)
    assert not any(r.getMessage().startswith("cleaning") for r in caplog.records)
    write_corpus(tmp_path / "train", PAIRS[:50] + NOISE)  # changed: cleaned again
    assert prepare(tmp_path, log, junk=True)[0].pairs == 52


def test_worker_processes_clean_as_this_process_does(monkeypatch):
    pytest.importorskip("py3langid", reason="the clean extra is not installed")
    pairs = PAIRS + NOISE + [("Un homme fait du vélo.", "A man rides a bike.")] * 2
    chunks = [PairChunk([s for s, _ in pairs], [t for _, t in pairs], 1)] * 3
    settings = FiltersConfig.recommended()
    found = []
    for workers in (1, 2):
        monkeypatch.setattr(cleaning, "cores", lambda workers=workers: workers)
        monkeypatch.setattr(cleaning, "SHARD", 37)
        cleaner = Cleaner(settings, ("de", "en"), print)
        report = cleaner.report("c")
        with cleaning.filter_pool(settings, ("de", "en")) as pool:
            assert (pool is None) == (workers == 1)
            kept = [(c.src, c.tgt) for c in clean_chunks(chunks, cleaner, report, pool)]
        found.append((kept, report.to_dict()))
    assert found[0] == found[1]
    assert found[0][1]["dropped"]["duplicates"] == 2 * (len(PAIRS) + 1) + 1


def test_prepare_dry_run_prints_the_counts_and_writes_nothing(tmp_path, capsys):
    train = write_corpus(tmp_path / "train", NOISE + PAIRS)
    data = {"src": "src", "tgt": "tgt", "train": train, "valid": train, "filters": FILTERS}
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps({"data": data}))
    before = sorted(tmp_path.rglob("*"))
    assert (
        run_cli("prepare", config, "--dry-run", "--pairs", 150, "--run-dir", tmp_path / "run") == 0
    )
    out = capsys.readouterr().out
    assert "train: kept 147 of 150 pairs (98.0%); dropped: junk 1, identical 1, duplicates 1" in out
    assert sorted(tmp_path.rglob("*")) == before
