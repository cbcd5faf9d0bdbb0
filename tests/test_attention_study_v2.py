"""The attention study's second edition (issue 34): what its sweep files promise, and its
page's figures against the committed reports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_helpers import train
from sweep_helpers import cells

from seq2seq.config import flatten
from seq2seq.sweep import load_sweep

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = ROOT / "configs/sweeps"
TEST_SETS = ["test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"]
# Each second-edition sweep: the first edition's sweep whose model and budget it keeps.
SECOND_EDITION = {
    "attention_rnn_v2.yaml": "attention_rnn.yaml",
    "attention_transformer_v2.yaml": "attention_transformer.yaml",
    "attention_temperature_rnn.yaml": "attention_rnn.yaml",
    "attention_temperature_transformer.yaml": "attention_transformer.yaml",
    "attention_qknorm.yaml": "attention_transformer.yaml",
    "attention_width.yaml": "attention_rnn.yaml",
    "attention_rnn_v2_fren.yaml": "attention_rnn.yaml",
    "attention_rnn_v2_ende.yaml": "attention_rnn.yaml",
    "attention_transformer_v2_fren.yaml": "attention_transformer.yaml",
    "attention_transformer_v2_ende.yaml": "attention_transformer.yaml",
}
DIRECTIONS = {"fren": ("fr", "en"), "ende": ("en", "de")}  # step 7's other directions
RUNS = {  # the plan's counts (docs/results/attention-study-v2.md)
    "attention_transformer_v2.yaml": 45,
    "attention_rnn_v2.yaml": 55,
    "attention_temperature_rnn.yaml": 15,
    "attention_temperature_transformer.yaml": 15,
    "attention_qknorm.yaml": 10,
    "attention_width.yaml": 27,
    "attention_rnn_v2_long.yaml": 22,
    "attention_transformer_v2_long.yaml": 18,
    "attention_rnn_v2_fren.yaml": 20,
    "attention_rnn_v2_ende.yaml": 20,
    "attention_transformer_v2_fren.yaml": 20,
    "attention_transformer_v2_ende.yaml": 20,
}


def types(sweep) -> set[str]:
    return {dict(cell.values)["model.attention.type"] for cell in sweep.cells}


@pytest.fixture(autouse=True)
def _from_the_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # sweep files name their base relative to the repository


@pytest.mark.parametrize("name", sorted(SECOND_EDITION))
def test_second_edition_keeps_the_first_editions_model_and_budget(name):
    sweep, first = load_sweep(SWEEPS / name), load_sweep(SWEEPS / SECOND_EDITION[name])
    config, before = sweep.runs[0].config, first.runs[0].config
    assert config.train.max_steps == before.train.max_steps
    assert config.tokenizer == before.tokenizer and config.data.train == before.data.train
    grid = set(sweep.definition.grid)
    same = {"embed_dim", "ff_dim", "encoder_layers", "decoder_layers", "dropout"}
    same |= {"hidden_dim"} - {field.split(".")[-1] for field in grid}
    assert {f: getattr(config.model, f) for f in same} == {
        f: getattr(before.model, f) for f in same
    }
    assert [Path(prefix).name for prefix in config.data.test] == TEST_SETS
    assert config.train.test_checkpoint == "last" and config.train.attention_diagnostics
    assert len(sweep.runs) == RUNS[name]


def test_the_main_sweeps_run_every_type_of_the_first_edition_with_five_seeds():
    for name in ("attention_rnn_v2.yaml", "attention_transformer_v2.yaml"):
        sweep, first = load_sweep(SWEEPS / name), load_sweep(SWEEPS / SECOND_EDITION[name])
        assert types(sweep) == types(first) and sweep.definition.seeds == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_step_7_runs_the_same_types_in_each_other_direction(arch):
    main = load_sweep(SWEEPS / f"attention_{arch}_v2.yaml")
    for direction, (src, tgt) in DIRECTIONS.items():
        sweep = load_sweep(SWEEPS / f"attention_{arch}_v2_{direction}.yaml")
        assert {(run.config.data.src, run.config.data.tgt) for run in sweep.runs} == {(src, tgt)}
        assert types(sweep) < types(main) and sweep.definition.seeds == [1, 2, 3, 4, 5]
        assert sweep.definition.baseline == main.definition.baseline


def test_the_comparisons_have_their_cells():
    temperature = load_sweep(SWEEPS / "attention_temperature_rnn.yaml")
    sections = {
        tuple(run.config.model.attention.model_dump(include={"type", "temperature"}).values())
        + (run.config.model.attention.learn_temperature,)
        for run in temperature.runs
    }
    assert sections == {
        ("scaled-dot", None, True), ("scaled-dot", 1.0, True), ("cosine", None, True),
        ("cosine", 1.0, False), ("cosine", 10.0, False),
    }  # fmt: skip
    qknorm = load_sweep(SWEEPS / "attention_qknorm.yaml")
    for run in qknorm.runs:
        model = run.config.model
        assert model.attention.type == model.self_attention.type  # everywhere, both ways
    width = load_sweep(SWEEPS / "attention_width.yaml")
    assert {run.config.model.hidden_dim for run in width.runs} == {64, 128, 256}
    assert types(width) == {"dot", "scaled-dot", "cosine"}
    assert width.baseline.within == ("model.hidden_dim",)  # each type at its own size


@pytest.mark.parametrize("arch, twice", [("rnn", 5000), ("transformer", 3000)])
def test_the_longer_sweeps_differ_from_their_sweep_in_budget_and_seeds_only(arch, twice):
    first = load_sweep(SWEEPS / f"attention_{arch}_v2.yaml")
    longer = load_sweep(SWEEPS / f"attention_{arch}_v2_long.yaml")
    assert longer.definition.continue_from is None  # trained from the start: see below
    assert longer.definition.seeds == [1, 2] and longer.cells == first.cells
    for run in longer.runs:
        a, b = (
            flatten(first.run(run.cell, run.seed).config.to_dict()),
            flatten(run.config.to_dict()),
        )
        assert {k for k in a if a[k] != b[k]} == {"name", "train.max_steps"}
        assert b["train.max_steps"] == 2 * a["train.max_steps"] == twice
        assert a["train.schedule.type"] in ("inverse_sqrt", "plateau")  # blind to the budget


def test_the_rnns_scaled_dot_normalizer_cells_differ_from_generals_in_the_score_only():
    general = load_sweep(SWEEPS / "attention_normalizers_rnn.yaml")
    scaled = load_sweep(SWEEPS / "attention_normalizers_rnn_scaled_dot.yaml")
    twins = {
        (run.config.model.attention.normalizer, run.seed): run.config
        for run in general.runs
        if run.config.model.attention.hard.estimator is None
    }
    normalizers = {run.config.model.attention.normalizer for run in scaled.runs}
    assert normalizers == {"softmax", "sparsemax", "entmax15"} and len(scaled.runs) == 15
    for run in scaled.runs:
        a = flatten(twins[run.config.model.attention.normalizer, run.seed].to_dict())
        b = flatten(run.config.to_dict())
        assert {k for k in a if a[k] != b[k]} == {"name", "model.attention.type"}
        assert (a["model.attention.type"], b["model.attention.type"]) == ("general", "scaled-dot")


@pytest.mark.parametrize(
    "schedule",
    [
        ["train.schedule.type=inverse_sqrt", "train.schedule.warmup_steps=3"],
        ["train.schedule.type=plateau", "train.schedule.patience=0"],
    ],
    ids=["inverse_sqrt", "plateau"],
)
def test_a_run_to_twice_the_budget_repeats_the_shorter_runs_updates(toy, tmp_path, schedule):
    """What the longer sweeps rest on: their first half is the first sweep's run."""
    logs = []
    for steps in (4, 8):
        run = tmp_path / str(steps)
        assert train(toy, run, f"train.max_steps={steps}", *schedule) == 0
        logs.append((run / "train.log").read_text())
    # each update's loss and each validation, without the timestamps and speeds
    pattern = r"INFO ((?:step|validation at step) \d+.*?)(?:  \d+ target tokens/s)?$"
    lines = [re.findall(pattern, log, re.MULTILINE) for log in logs]
    assert len(lines[0]) == 4 + 2 and lines[1][:6] == lines[0]
    assert len(lines[1]) == 8 + 4


def report_cells(report: Path) -> dict[tuple[str, tuple[str, ...]], list[str]]:
    """(test set, a row's grid values) -> the row's other cells (seeds, BLEU, Δ BLEU, p,
    wins, ...) in a sweep report's tables per test set."""
    found, test_set, grid = {}, None, 1
    for line in report.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            test_set = line[3:] if line[3:] in TEST_SETS else None
        elif test_set and line.startswith("| model."):
            grid = sum(cell.startswith("model.") for cell in cells(line))
        elif test_set and line.startswith("| "):
            row = cells(line)
            found[test_set, (row[0].split(" ")[0], *row[1:grid])] = row[grid:]
    return found


STEPS = {  # step -> its sweep, the first edition's, how many types and the seeds both ran
    "1": ("attention-transformer-v2", "attention-transformer", 9, "12"),
    "2": ("attention-rnn-v2", "attention-rnn", 11, "123"),
}
# The temperature sweeps' cells (step 3): a row's name on the page -> its grid values.
TEMPERATURE_CELLS = {
    "`scaled-dot`": ("scaled-dot", "null", "true"),
    "`scaled-dot`, g learned from 1": ("scaled-dot", "1", "true"),
    "`cosine`, g learned from 10": ("cosine", "null", "true"),
    "`cosine`, g fixed at 10": ("cosine", "10", "false"),
    "`cosine`, g fixed at 1": ("cosine", "1", "false"),
}
# The width sweep's cells (step 4): `dot` at 64 -> ("dot", "64").
WIDTH_CELLS = {
    f"`{kind}` at {size}": (kind, size)
    for kind in ("scaled-dot", "dot", "cosine")
    for size in ("64", "128", "256")
}
# The normalizer sweeps' cells (step 6): a row's name on the page -> its grid values.
NORMALIZER_CELLS = {
    "`softmax`": ("softmax", "null"),
    "`sparsemax`": ("sparsemax", "null"),
    "`entmax15`": ("entmax15", "null"),
    "`entmax` (learned alpha)": ("entmax", "null"),
    **{
        f"`hard`, `{estimator}`": ("hard", estimator)
        for estimator in ("exact", "reinforce", "gumbel")
    },
}
TABLES = {  # a step table's title -> its sweep and rows; a row's name -> its grid values
    **{f"Step {step}:": (sweep, types, {}) for step, (sweep, _, types, _) in STEPS.items()},
    **{
        f"Step 3: cosine or dot in the {arch}": (
            f"attention-temperature-{sweep}",
            5,
            TEMPERATURE_CELLS,
        )
        for arch, sweep in (("RNN", "rnn"), ("Transformer", "transformer"))
    },
    "Step 3: query-key normalisation in the Transformer": (
        "attention-qknorm",
        2,
        {
            "`scaled-dot` everywhere": ("scaled-dot", "scaled-dot", "null", "null"),
            "`cosine` everywhere, g learned from 9.86": ("cosine", "cosine", "9.86", "9.86"),
        },
    ),
    "Step 4: the width sweep": ("attention-width", 9, WIDTH_CELLS),
    **{
        f"Step 6: soft, sparse and hard attention in the {arch}": (sweep, cells, NORMALIZER_CELLS)
        for arch, sweep, cells in (
            ("RNN", "attention-normalizers-rnn", 7),
            ("Transformer", "attention-normalizers-transformer", 5),
        )
    },
    "Step 6: sparse attention with `scaled-dot` scores in the RNN": (
        "attention-normalizers-rnn-scaled-dot",
        3,
        {},
    ),
    "Step 7: the RNN, French to English": ("attention-rnn-v2-fren", 4, {}),
    "Step 7: the RNN, English to German": ("attention-rnn-v2-ende", 4, {}),
    "Step 7: the Transformer, French to English": ("attention-transformer-v2-fren", 4, {}),
    "Step 7: the Transformer, English to German": ("attention-transformer-v2-ende", 4, {}),
}
# Step 7's Findings: an architecture's table -> its sweeps, one a direction, as the page's
# columns have them.
DIRECTION_TABLES = {
    "The RNN": ("attention-rnn-v2", "attention-rnn-v2-fren", "attention-rnn-v2-ende"),
    "The Transformer": (
        "attention-transformer-v2",
        "attention-transformer-v2-fren",
        "attention-transformer-v2-ende",
    ),
}


@pytest.mark.parametrize("title", TABLES)
def test_the_study_pages_step_table_is_its_reports(title):
    """Every difference, interval, adjusted p and † of the page's table, as the committed
    report has it (BLEU: the row's Δ and p columns), and each baseline's mean ± sd."""
    sweep, rows_wanted, grid_values = TABLES[title]
    page = (ROOT / "docs/results/attention-study-v2.md").read_text(encoding="utf-8")
    section = page.split(f"### {title}")[1].split("\n\n")[2]
    report = report_cells(ROOT / f"docs/results/{sweep}/report/results.md")
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == rows_wanted
    for row in rows:
        name, *ours = cells(row)
        baseline = name.endswith(" (baseline)")
        name = name.removesuffix(" (baseline)")
        key = grid_values.get(name, (name.strip("`"),))
        for test_set, cell in zip(TEST_SETS, ours[:3], strict=True):
            _, their_bleu, their_difference, their_p, *_ = report[test_set, key]
            if baseline:
                assert cell == their_bleu
                continue
            difference, adjusted = cell.split(", p ")
            assert their_difference == difference
            their_adjusted = re.search(r"\((\S+)\)", their_p).group(1)
            assert float(their_adjusted) == float(adjusted.rstrip(" †"))
            assert ("†" in their_p) == adjusted.endswith("†")


@pytest.mark.parametrize("step", STEPS)
def test_the_study_pages_first_edition_table_is_the_committed_runs(step):
    """Each seed's test_2016_flickr BLEU, first edition -> second, as the runs' scores."""
    second, first, types, seeds = STEPS[step]

    def bleu(sweep: str, kind: str, seed: str) -> float:
        run = ROOT / f"docs/results/{sweep}/runs/attention.type={kind},seed={seed}"
        scores = json.loads((run / "test/scores.json").read_text(encoding="utf-8"))
        return scores["test_2016_flickr"]["bleu"]

    page = (ROOT / "docs/results/attention-study-v2.md").read_text(encoding="utf-8")
    section = re.split(r"\n##+ ", page.split(f"### Step {step} against the first edition")[1])[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == types
    for row in rows:
        kind, *cells_of_seeds = cells(row)
        for seed, cell in zip(seeds, cells_of_seeds, strict=True):
            first_bleu, second_bleu = (float(x) for x in cell.split(" -> "))
            assert first_bleu == bleu(first, kind.strip("`"), seed)
            assert second_bleu == bleu(second, kind.strip("`"), seed)


@pytest.mark.parametrize("title", DIRECTION_TABLES)
def test_the_study_pages_direction_table_is_compare_directions(title, load_script):
    """Each difference, interval and p of step 7's Findings table, as
    scripts/compare_directions.py gives them from the committed reports (p re-adjusted by
    Holm over the directions' shared family)."""
    compare = load_script("compare_directions")
    sweeps = [f"{name}={ROOT / 'docs/results' / name}" for name in DIRECTION_TABLES[title]]
    directions, cells_compared, tests = compare.load(sweeps, "bleu")
    page = (ROOT / "docs/results/attention-study-v2.md").read_text(encoding="utf-8")
    findings = page.split("## Findings (step 7)")[1].split(f"### {title}\n")[1]
    rows = [cells(line) for line in findings.split("\n\n")[1].splitlines()[2:]]
    assert len(rows) == (len(cells_compared) - 1) * len(tests) == 9  # the baseline aside
    for kind, test, *ours in rows:
        for direction, entry in zip(directions, ours, strict=True):
            found = direction.differences[kind.strip("`"), test]
            interval = f"[{found.low:+.2f}, {found.high:+.2f}]"
            assert entry == f"{found.diff:+.2f} {interval}, p {found.p_holm:.3f}"


def test_the_readmes_table_is_the_second_editions_reports():
    """Each type's test_2016_flickr mean ± sd and wins in the README, as the reports have them."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("| attention | RNN, second edition |")[1].split("\n\n")[0]
    reports = [
        report_cells(ROOT / f"docs/results/{sweep}/report/results.md")
        for sweep in ("attention-rnn-v2", "attention-transformer-v2")
    ]
    rows = [cells(line) for line in table.splitlines() if line.startswith("| `")]
    checked = 0
    for kind, *columns in rows:
        for report, bleu, wins in zip(reports, columns[0::2], columns[1::2], strict=True):
            if bleu.startswith("(is"):
                continue
            theirs = report["test_2016_flickr", (kind.split("`")[1],)]
            assert theirs[1] == bleu
            assert wins == "baseline" if theirs[2] == "baseline" else wins == theirs[4]
            checked += 1
    assert checked == len(rows) * 2 - 2  # bahdanau and scaled-dot are one model each there
