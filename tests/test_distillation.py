"""Knowledge distillation: the word-level loss (`train.distill`) against a hand-computed KL,
its gradient, lambda 0 as ordinary training, exact resumption, and a teacher of another
vocabulary refused."""

import math
import re

import pytest
import torch
from cli_helpers import train, train_straight_and_resumed

from seq2seq.checkpoint import load_checkpoint
from seq2seq.config import config_from_dict
from seq2seq.errors import UserError
from seq2seq.train.distillation import distillation_loss

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


def test_an_rnn_teaches_a_transformer(toy, trained, tmp_path):
    student = ["model.arch=transformer", "model.attention.type=multihead", "train.max_steps=2"]
    assert train(toy, tmp_path / "run", *distilled(trained, 0.5), *student) == 0
    assert "teacher" in (tmp_path / "run/train.log").read_text()
