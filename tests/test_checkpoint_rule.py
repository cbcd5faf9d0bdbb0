"""`train.test_checkpoint`: the checkpoint that translates the test sets, and the last
checkpoint's scores kept beside those of the one the rule picks."""

from __future__ import annotations

import json
import shutil

from cli_helpers import train


def test_the_rule_picks_the_tested_checkpoint_and_the_last_is_kept_beside(toy, tmp_path):
    best = tmp_path / "best"
    assert train(toy, best, "train.max_steps=6", "train.valid_every=2") == 0
    chosen = json.loads((best / "test/scores.json").read_text())
    last = json.loads((best / "test/last/scores.json").read_text())
    assert set(chosen) == set(last) == {"test"}
    assert len((best / "test/last/test.hyp").read_text().splitlines()) == 10

    # The same run tested with its last checkpoint: what test/last/ holds.
    only_last = tmp_path / "last"
    rule = "train.test_checkpoint=last"
    assert train(toy, only_last, "train.max_steps=6", "train.valid_every=2", rule) == 0
    assert not (only_last / "test/last").exists()  # the tested one is the last
    hypotheses = (only_last / "test/test.hyp").read_text()
    assert hypotheses == (best / "test/last/test.hyp").read_text()
    assert json.loads((only_last / "test/scores.json").read_text()) == last

    # The rule may change on a finished run: resuming tests it again with the new one.
    averaged = tmp_path / "average"
    shutil.copytree(best, averaged)
    rule = "train.test_checkpoint=average"
    assert train(toy, averaged, "train.max_steps=6", "train.valid_every=2", rule) == 0
    log = (averaged / "train.log").read_text().split("resumed")[-1]
    kept = ", ".join(sorted(p.stem for p in (best / "checkpoints").glob("step-*.pt")))
    assert f"testing the mean of {kept}" in log and "test test (average)" in log

    # Changed to `last`: the scores an earlier rule kept in test/last/ go.
    relabelled = tmp_path / "relabelled"
    shutil.copytree(averaged, relabelled)
    rule = "train.test_checkpoint=last"
    assert train(toy, relabelled, "train.max_steps=6", "train.valid_every=2", rule) == 0
    assert not (relabelled / "test/last").exists()
    assert (relabelled / "test/test.hyp").read_text() == hypotheses
