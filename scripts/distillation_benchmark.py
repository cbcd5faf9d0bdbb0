"""Knowledge distillation on Multi30k de->en (docs/benchmarks.md#distillation): a teacher,
the Transformer recipe trained 1,550 updates (about its 25-minute run), and two students
that share its tokenizer, the attention study's small Transformer (1,500 updates) and its
RNN (2,500), each from scratch, with sequence-level distillation (`seq2seq distill`, beam
5), with word-level distillation (`train.distill`, weight 0.5, top 8) and with both, seeds
1 and 2; the last checkpoint tested on the three test sets.

    python scripts/distillation_benchmark.py train [--only NAME ...]   # resumable
    python scripts/distillation_benchmark.py table                     # markdown

`train` trains what is missing into docs/results/distillation/runs/ (the distilled corpus
goes to data/distilled/), in order: the teacher, the distilled corpus, then each student.
A killed `train` goes on where it stopped when run again. The decoding speeds of the
teacher and the students: scripts/bench_deployment.py.
"""

from __future__ import annotations

from pathlib import Path

from benchmark_runs import bleu, cell, finished, main, seq2seq, sets

RUNS = Path("docs/results/distillation/runs")
TEACHER = RUNS / "teacher"
DISTILLED = Path("data/distilled")
SEEDS = (1, 2)
STUDENTS = {
    "transformer": ("configs/study/transformer.yaml", 1500),
    "rnn": ("configs/study/rnn.yaml", 2500),
}
KINDS = ("scratch", "sequence", "word", "both")
TEST_SETS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")
WORD_LEVEL = f"{{teachers: [{TEACHER}], weight: 0.5, top_k: 8, temperature: 1}}"


def train_teacher() -> None:
    budget = ["train.max_steps=1550", "train.max_time=null", "train.patience=null"]
    # Tested on `best`, the checkpoint that teaches (`distill`'s and train.distill's default).
    fixed = ["train.precision=fp32", "train.test_checkpoint=best", "name=teacher"]
    fixed.append("train.threads=1")  # as the students: runs beside others share the cores
    seq2seq(
        "train",
        "configs/multi30k_transformer.yaml",
        *sets(*budget, *fixed),
        "--run-dir",
        str(TEACHER),
    )


def distilled_prefix(config: str) -> str:
    """The distilled corpus of the student config's training corpus (made if missing)."""
    from seq2seq.config import load_config
    from seq2seq.train.distilled_corpus import Teachers, planned

    student = [f"tokenizer.model={TEACHER / 'tokenizer'}"]
    seq2seq(
        "distill",
        "--teacher",
        str(TEACHER),
        config,
        "--beam",
        "5",
        "--out",
        str(DISTILLED),
        "--no-train",
        *sets(*student),
    )
    (corpus,) = planned(
        load_config(config, student), Teachers((TEACHER,), decode=(("beam", 5),)), DISTILLED
    )
    return str(corpus.prefix)


def student_settings(student: str, kind: str, seed: int, prefix: str) -> list[str]:
    config, steps = STUDENTS[student]
    settings = [
        f"tokenizer.model={TEACHER / 'tokenizer'}",
        f"train.max_steps={steps}",
        f"seed={seed}",
    ]
    settings.append(f"name={student}-{kind}-seed{seed}")
    if kind in ("sequence", "both"):
        settings.append(f"data.train={prefix}")
    if kind in ("word", "both"):
        settings.append(f"train.distill={WORD_LEVEL}")
    return [config, *sets(*settings)]


def train_runs(only: list[str]) -> None:
    """The teacher, the distilled corpus, then every student not finished."""
    if not finished(TEACHER):
        train_teacher()
    prefix = distilled_prefix(STUDENTS["transformer"][0])
    for seed in SEEDS:
        for student in STUDENTS:
            for kind in KINDS:
                name = f"{student}-{kind}-seed{seed}"
                if finished(RUNS / name) or (only and name not in only):
                    continue
                print(f"training {name}", flush=True)
                arguments = student_settings(student, kind, seed, prefix)
                seq2seq("train", *arguments, "--run-dir", str(RUNS / name))


def table() -> str:
    """Test BLEU (the seeds' mean, each seed) per student and kind, and whether each seed
    of a distilled kind is above the same seed from scratch on every test set."""
    head = ["model", *TEST_SETS, "above scratch (each seed, every set)"]
    rows = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    teacher = [cell([bleu(TEACHER, test)]) for test in TEST_SETS]
    rows.append("| teacher (best checkpoint) | " + " | ".join(teacher) + " | |")
    for student in STUDENTS:
        for kind in KINDS:
            runs = student_runs(student, kind)
            scores = [cell([bleu(run, test) for run in runs]) for test in TEST_SETS]
            verdict = "" if kind == "scratch" else above_scratch(student, kind)
            rows.append(f"| {student}, {kind} | " + " | ".join(scores) + f" | {verdict} |")
    return "\n".join(rows)


def student_runs(student: str, kind: str) -> list[Path]:
    return [RUNS / f"{student}-{kind}-seed{seed}" for seed in SEEDS]


def above_scratch(student: str, kind: str) -> str:
    """yes / no / (not finished): each seed above the same seed from scratch everywhere."""
    pairs = list(zip(student_runs(student, kind), student_runs(student, "scratch"), strict=True))
    found = [(bleu(ours, test), bleu(theirs, test)) for ours, theirs in pairs for test in TEST_SETS]
    if any(None in pair for pair in found):
        return "(not finished)"
    return "yes" if all(ours > theirs for ours, theirs in found) else "no"


if __name__ == "__main__":
    main(__doc__, train_runs, table)
