"""Knowledge distillation: the word-level loss (`train.distill`) against a hand-computed KL,
its gradient, lambda 0 as ordinary training, exact resumption, and a teacher of another
vocabulary refused."""

import json
import logging
import math
import re
import shutil
import statistics
import time
from functools import partial
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli, train, train_straight_and_resumed

from seq2seq.checkpoint import load_checkpoint
from seq2seq.config import config_from_dict, corpus_path, load_config
from seq2seq.errors import UserError
from seq2seq.train import distilled_corpus
from seq2seq.train.distillation import distillation_loss
from seq2seq.train.distilled_corpus import Teachers, distill, planned
from seq2seq.train.trainer import Trainer

TEACHER = [0.5, 0.2, 0.15, 0.1, 0.05]  # the teacher's distribution over 5 pieces


def hand_kl(student: list[float], top_k: int, t: float) -> float:
    """t^2 KL(p || q) written out: p the teacher's top k of p^(1/t), renormalised; q the
    student's softmax(z / t)."""
    softened = [p ** (1 / t) for p in TEACHER]
    kept = sorted(range(len(TEACHER)), key=lambda v: -TEACHER[v])[:top_k]
    p = {v: softened[v] / sum(softened[u] for u in kept) for v in kept}
    norm = sum(math.exp(z / t) for z in student)
    q = [math.exp(z / t) / norm for z in student]
    return t**2 * sum(p[v] * math.log(p[v] / q[v]) for v in kept)


@pytest.mark.parametrize(("top_k", "t"), [(3, 1.0), (5, 1.0), (2, 2.0)])
def test_the_loss_is_the_kl_computed_by_hand(top_k, t):
    student = [0.3, -1.0, 2.0, 0.5, 0.0]
    logits = torch.tensor([[student, student]], dtype=torch.float64)  # (B=1, T=2, V=5)
    teacher = torch.tensor(TEACHER, dtype=torch.float64).log().expand(1, 2, 5)
    targets = torch.tensor([[4, 0]])  # the second position is padding
    found = distillation_loss(logits, teacher, targets, top_k, t)
    assert found.item() == pytest.approx(hand_kl(student, top_k, t), rel=1e-6)


def test_its_gradient_is_t_times_q_minus_p():
    logits = torch.randn(2, 3, 7, requires_grad=True)
    teacher = torch.randn(2, 3, 7).log_softmax(-1)
    t, k = 2.0, 3
    distillation_loss(logits, teacher, torch.full((2, 3), 5), k, t).backward()
    top, pieces = (teacher / t).topk(k, dim=-1)
    p = torch.zeros(2, 3, 7).scatter(-1, pieces, top.softmax(-1))
    q = (logits.detach() / t).softmax(-1)
    assert torch.allclose(logits.grad, t * (q - p), atol=1e-6)


def distilled(trained, weight: float) -> list[str]:
    """--set lines: the student shares `trained`'s tokenizer and learns from it."""
    teacher = f"{{teachers: [{trained}], weight: {weight}, top_k: 4, temperature: 2}}"
    return [f"tokenizer.model={trained / 'tokenizer'}", f"train.distill={teacher}"]


def weights(run):
    return load_checkpoint(run / "checkpoints/last.pt")["model"]


def test_lambda_0_is_ordinary_training_and_a_distilled_run_resumes_exactly(toy, trained, tmp_path):
    shared = [f"tokenizer.model={trained / 'tokenizer'}", "train.max_steps=4"]
    assert train(toy, tmp_path / "plain", *shared) == 0
    assert train(toy, tmp_path / "zero", *distilled(trained, 0.0), "train.max_steps=4") == 0
    plain, zero = weights(tmp_path / "plain"), weights(tmp_path / "zero")
    assert all(torch.equal(plain[name], zero[name]) for name in plain)
    straight, resumed = train_straight_and_resumed(
        toy, tmp_path, *distilled(trained, 0.5), steps=4, stop=2
    )
    ours, theirs = weights(straight), weights(resumed)
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)
    assert not all(torch.equal(ours[name], plain[name]) for name in ours)  # it taught
    assert "teacher" in (straight / "train.log").read_text()  # its share of the time


def test_a_teacher_of_another_vocabulary_is_refused(toy, trained, tmp_path, capsys):
    teacher = f"train.distill={{teachers: [{trained}]}}"
    assert train(toy, tmp_path / "run", teacher, "tokenizer.vocab_size=100") == 2
    err = capsys.readouterr().err
    assert "train.distill: " in err and "has another target vocabulary than the student" in err
    assert f"tokenizer.model: {trained / 'tokenizer'}" in err


@pytest.mark.parametrize(
    ("distill", "error"),
    [
        ({"teachers": []}, "train.distill.teachers = []: List should have at least 1 item"),
        ({"teachers": ["r"], "weight": 2}, "Input should be less than or equal to 1"),
        ({"teachers": ["r"], "top_k": 0}, "Input should be greater than or equal to 1"),
    ],
)
def test_bad_distillation_settings_are_one_line_each(distill, error):
    data = {"src": "de", "tgt": "en", "train": "a", "valid": "v"}
    with pytest.raises(UserError, match=re.escape(error)):
        config_from_dict({"data": data, "train": {"distill": distill}})


def test_a_teacher_it_cannot_follow_is_refused(toy, trained, tmp_path, capsys):
    """One line each for a top_k over the target vocabulary, a teacher that reads other
    tags before its sources (its config says so), a pair the teacher does not translate."""
    big = [f"train.distill={{teachers: [{trained}], top_k: 500}}"]
    tagged = tmp_path / "tagged"
    shutil.copytree(trained, tagged, ignore=shutil.ignore_patterns("step-*", "last.pt"))
    config = (tagged / "config.yaml").read_text()
    (tagged / "config.yaml").write_text(config.replace("target_tags: null", "target_tags: true"))
    cases = [
        (big, "train.distill.top_k 500 is more than the 120 target pieces; give at most 120"),
        (distilled(tagged, 0.5), "reads other tags before its sources than the student"),
        (
            [*distilled(trained, 0.5), "data.src=tgt", "data.tgt=src"],
            f"is tgt-src, and the teacher {trained} translates from src into tgt: distill",
        ),
    ]
    for settings, error in cases:
        assert (
            train(toy, tmp_path / "run", f"tokenizer.model={trained / 'tokenizer'}", *settings) == 2
        )
        err = capsys.readouterr().err
        assert error in err.splitlines()[-1] and "Traceback" not in err, err
        assert "preparing" not in err  # refused before the data was prepared


def test_a_teacher_changed_under_a_resumed_run_is_noticed(toy, trained, tmp_path):
    teacher = tmp_path / "teacher"
    shutil.copytree(trained, teacher, ignore=shutil.ignore_patterns("step-*", "last.pt"))
    assert train(toy, tmp_path / "run", *distilled(teacher, 0.5), "train.max_steps=2") == 0
    best = teacher / "checkpoints/best.pt"
    state = torch.load(best, weights_only=False)
    name = next(iter(state["model"]))
    state["model"][name] = state["model"][name] + 0.01
    torch.save(state, best)
    assert train(toy, tmp_path / "run", *distilled(teacher, 0.5), "train.max_steps=3") == 0
    log = (tmp_path / "run/train.log").read_text()
    assert "the teacher's checkpoint (train.distill) changed since this run started" in log


def test_the_speed_and_the_teacher_s_share_leave_validations_out(
    toy, trained, tmp_path, monkeypatch
):
    """A log line's tokens/s and teacher share are of the updates since the last line:
    a validation between them (made slow here) is not in them."""
    validate = Trainer.validate

    def slow(self, board):
        time.sleep(0.3)
        validate(self, board)

    monkeypatch.setattr(Trainer, "validate", slow)
    budget = ["train.max_steps=4", "train.log_every=1", "train.valid_every=2", "data.test=[]"]
    assert train(toy, tmp_path / "run", *distilled(trained, 0.5), *budget) == 0
    log = (tmp_path / "run/train.log").read_text()
    found = re.findall(r"step (\d) .* ([\d.]+) target tokens/s  teacher (\d+)% of", log)
    speeds = {int(step): float(speed) for step, speed, _ in found}
    assert len(speeds) == 4 and speeds[3] > 0.25 * statistics.median(speeds.values()), speeds
    assert all(int(share) > 1 for *_, share in found), found


def test_an_rnn_teaches_a_transformer(toy, trained, tmp_path):
    student = ["model.arch=transformer", "model.attention.type=multihead", "train.max_steps=2"]
    assert train(toy, tmp_path / "run", *distilled(trained, 0.5), *student) == 0
    assert "teacher" in (tmp_path / "run/train.log").read_text()


class Killed(Exception):
    """What stops a distillation midway here, as a kill would."""


def test_a_distillation_cut_short_goes_on_to_the_same_corpus(toy, trained, tmp_path, monkeypatch):
    """Chunks of 50 pairs: an uninterrupted distillation, and one whose third chunk fails
    (as a kill would leave it: two chunks written) then run again, which translates the
    four chunks left and writes the same bytes."""
    cfg = load_config(toy / "run.yaml")
    teachers = Teachers((trained,), decode=(("beam", 2),))
    monkeypatch.setattr(distilled_corpus, "CHUNK_PAIRS", 50)
    log = logging.getLogger("test")
    straight = planned(cfg, teachers, tmp_path / "straight")
    distill(straight, teachers, 1, log)
    translate = distilled_corpus._translate_chunk
    calls = []

    def failing(work, stop_at: int | None = 3):
        calls.append(work)
        if len(calls) == stop_at:
            raise Killed
        return translate(work)

    monkeypatch.setattr(distilled_corpus, "_translate_chunk", failing)
    cut = planned(cfg, teachers, tmp_path / "cut")
    with pytest.raises(Killed):
        distill(cut, teachers, 1, log)
    assert len(list(cut[0].parts.iterdir())) == 2 and not cut[0].done()
    calls.clear()
    monkeypatch.setattr(distilled_corpus, "_translate_chunk", partial(failing, stop_at=None))
    distill(cut, teachers, 1, log)
    assert len(calls) == 4 and cut[0].done() and not cut[0].parts.exists()
    for language in ("src", "tgt"):
        ours, theirs = (Path(f"{plan[0].prefix}.{language}") for plan in (cut, straight))
        assert ours.read_bytes() == theirs.read_bytes()
    manifest = json.loads(cut[0].manifest_path.read_text())
    assert manifest["decode"]["beam"] == 2 and manifest["teachers"][0]["checkpoint"] == "best"
    assert cut[0].prefix.name == straight[0].prefix.name  # named by what made it


def test_each_dataset_is_distilled_apart_and_a_bad_pair_before_any(toy, trained, tmp_path):
    """Two hub datasets (no files here to hash) get two corpora; a corpus of a pair the
    teacher does not translate is refused before the first corpus is translated."""
    data = {"src": "src", "tgt": "tgt", "valid": str(toy / "data/valid")}
    hub = [{"dataset": f"org{n}/corpus", "columns": {"src": "a", "tgt": "b"}} for n in (1, 2)]
    cfg = config_from_dict({"data": {**data, "train": hub}})
    first, second = planned(cfg, Teachers((trained,)), tmp_path)
    assert first.prefix != second.prefix
    assert first.manifest["sources"]["dataset"] != second.manifest["sources"]["dataset"]
    reverse = {"path": str(toy / "data/train"), "src": "tgt", "tgt": "src"}
    cfg = config_from_dict({"data": {**data, "train": [str(toy / "data/train"), reverse]}})
    with pytest.raises(UserError, match="data/train is tgt-src, and the teacher .* into tgt"):
        planned(cfg, Teachers((trained,)), tmp_path)


def test_distill_trains_the_student_on_the_teacher_s_translations(toy, trained, tmp_path, capsys):
    sources = (toy / "data/train.src").read_text().splitlines()
    common = ["--teacher", trained, "--beam", "1", "--out", tmp_path / "kd", toy / "run.yaml"]
    assert run_cli("distill", *common, "--jobs", "2", "--no-train") == 0
    done = f"translated {len(sources)} of {len(sources)} pairs ("  # a log file's progress
    assert re.search(
        re.escape(done) + r"[\d.]+ pairs/s; about 0 min left\)", capsys.readouterr().err
    )
    (made,) = tmp_path.glob("kd/train.kd-*.src")
    assert made.read_text().splitlines() == sources  # in order, whichever process translated
    student = [
        "--set",
        "train.max_steps=2",
        "--original-weight",
        "0.5",
        "--run-dir",
        tmp_path / "run",
    ]
    assert run_cli("distill", *common, *student) == 0
    data = load_config(tmp_path / "run/config.yaml").data
    assert [corpus_path(corpus) for corpus in data.train_corpora] == [
        str(made.with_suffix("")),
        str(toy / "data/train"),
    ]
    assert data.weights == [1.0, 0.5] and (tmp_path / "run/test/scores.json").is_file()
    capsys.readouterr()
    # A weight data.weights refuses: refused before anything is translated.
    other = ["--teacher", trained, "--beam", "2", "--out", tmp_path / "kd2", toy / "run.yaml"]
    assert run_cli("distill", *other, "--original-weight", "0") == 2
    err = capsys.readouterr().err
    assert "--original-weight 0.0: config error: data.weights.1 = 0.0: " in err, err
    assert err.count("\n") == 1
    assert not (tmp_path / "kd2").exists()


def test_the_deployment_table_puts_each_run_against_the_teacher(load_script, trained, monkeypatch):
    bench = load_script("bench_deployment")
    measured = {
        ("float32", 1): (40.0, 30.5),
        ("float32", 5): (10.0, 31.0),
        ("int8", 1): (80.0, 30.0),
        ("int8", 5): (30.0, 30.75),
        ("int8, shortlist", 1): (100.0, 29.5),
        ("int8, shortlist", 5): (40.0, 30.5),
    }
    slower = {setting: (speed / 2, bleu) for setting, (speed, bleu) in measured.items()}
    passes = iter([measured, slower, measured, measured, slower, measured])
    monkeypatch.setattr(bench, "speeds", lambda run, args: next(passes))
    rows = bench.table([trained, trained], bench.argparse.Namespace(rounds=3)).splitlines()
    found = json.loads((trained / "test/scores.json").read_text())["test"]
    assert rows[0].startswith("| run | parameters | test BLEU / chrF | float32, beam 1: sent/s, ")
    assert f"{found['bleu']:.2f} / {found['chrf']:.2f}" in rows[2]
    cells = "| 40.0 (4.0x), 30.50 | 10.0 (1.0x), 31.00 | 80.0 (8.0x), 30.00 | 30.0 (3.0x), 30.75 "
    assert rows[3].endswith(cells + "| 100.0 (10.0x), 29.50 | 40.0 (4.0x), 30.50 |")
    assert rows[0].endswith("| int8, shortlist, beam 5: sent/s, BLEU |")


def test_the_deployment_speeds_time_each_decoding_with_its_own_options(
    load_script, trained, monkeypatch
):
    bench = load_script("bench_deployment")
    asked = []

    def decode(command, **kwargs):
        asked.append(command)
        lines = [
            {"beam": beam, "sentences_per_s": 10.0 * len(asked), "bleu": beam} for beam in (1, 5)
        ]
        return bench.subprocess.CompletedProcess(command, 0, "\n".join(map(json.dumps, lines)))

    monkeypatch.setattr(bench.subprocess, "run", decode)
    args = bench.argparse.Namespace(input="in.de", ref="in.en", threads=2, limit=None)
    found = bench.speeds(trained, args)
    assert [command[-3:] for command in asked] == [
        ["--engine", "torch", "--no-shortlist"],
        ["--engine", "torch-int8", "--no-shortlist"],
        ["--engine", "torch-int8", "--shortlist"],
    ]
    assert all("--checkpoint" in c and c[c.index("--checkpoint") + 1] == "best" for c in asked)
    assert found[("float32", 5)] == (10.0, 5) and found[("int8, shortlist", 1)] == (30.0, 1)
    assert set(found) == set(bench.SETTINGS)


def test_the_deployment_table_refuses_runs_it_cannot_compare(load_script, trained, tmp_path):
    bench = load_script("bench_deployment")
    assert bench.untestable([trained, trained]) is None
    assert bench.untestable([trained, tmp_path]) == (
        f"{tmp_path}: no readable test/scores.json (BLEU and chrF per test set), "
        "summary.json (parameters) and config.yaml: give runs trained to their end"
    )
    other = tmp_path / "other"
    (other / "test").mkdir(parents=True)
    (other / "summary.json").write_text('{"parameters": 1}')
    config = (trained / "config.yaml").read_text()
    (other / "config.yaml").write_text(config)
    (other / "test/scores.json").write_text("{not json")
    assert bench.untestable([trained, other]).startswith(f"{other}: no readable test/scores")
    (other / "test/scores.json").write_text(json.dumps({"elsewhere": {"bleu": 1.0, "chrf": 2.0}}))
    assert bench.untestable([trained, other]) == (
        f"{other}: not tested on test, as the teacher ({trained}) was"
    )
    averaged = config.replace("test_checkpoint: best", "test_checkpoint: average")
    (other / "config.yaml").write_text(averaged)
    assert bench.untestable([trained, other]) == (
        f"{other}: tested on the average of checkpoints, not one checkpoint to time"
    )
