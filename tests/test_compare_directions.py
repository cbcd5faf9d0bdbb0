"""scripts/compare_directions.py on hand-made sweep reports: only the shared cells and test
sets are compared, Holm's adjustment is redone over that family, and each difference from
the baseline is followed across directions."""

from __future__ import annotations

import sys

import pytest

TESTS = ("t1", "t2")


def report(sweep, cells: dict[str, dict[str, tuple]], tests=TESTS, seeds=None) -> str:
    """A results.csv with `cells` (name -> test set -> (mean, diff, p); the baseline's diff
    and p None), as `seq2seq sweep report` writes it; `seeds`: a cell's, where not 1 2 3."""
    columns = ["model.attention.type", "baseline", "seeds"]
    for test in tests:
        columns += [f"{test}_bleu_{part}" for part in ("mean", "diff", "low", "high", "p")]
    lines = [",".join(columns)]
    for name, by_test in cells.items():
        is_base = by_test[tests[0]][1] is None
        row = [name, str(is_base), (seeds or {}).get(name, "1 2 3")]
        for test in tests:
            mean, diff, p = by_test[test]
            bounds = ("", "") if diff is None else (diff - 1, diff + 1)
            row += [mean, "" if diff is None else diff, *bounds, "" if p is None else p]
        lines.append(",".join(str(value) for value in row))
    (sweep / "report").mkdir(parents=True)
    (sweep / "report" / "results.csv").write_text("\n".join(lines) + "\n")
    return str(sweep)


def run(load_script, monkeypatch, capsys, *argv: str) -> str:
    monkeypatch.setattr(sys, "argv", ["compare_directions.py", *argv])
    load_script("compare_directions").main()
    return capsys.readouterr().out


def test_differences_are_followed_across_directions_on_the_shared_cells(
    load_script, monkeypatch, capsys, tmp_path
):
    base = {t: (30.0, None, None) for t in TESTS}
    one = report(
        tmp_path / "one",
        {
            "b": base,
            "x": {"t1": (32.0, 2.0, 0.01), "t2": (31.0, 1.0, 0.03)},
            "y": {"t1": (29.0, -1.0, 0.02), "t2": (29.5, -0.5, 0.04)},
            "z": {"t1": (20.0, -10.0, 0.5), "t2": (20.0, -10.0, 0.5)},  # not in fr-en
        },
    )
    two = report(
        tmp_path / "two",
        {
            "b": base,
            "x": {"t1": (31.0, 1.0, 0.001), "t2": (29.0, -1.0, 0.5)},
            "y": {"t1": (28.0, -2.0, 0.001), "t2": (31.0, 1.0, 0.5)},
        },
    )
    out = run(load_script, monkeypatch, capsys, f"de-en={one}", f"fr-en={two}")
    # z leaves the family: Holm over 4 p-values 0.01, 0.02, 0.03, 0.04 -> .04, .06, .06, .06
    assert "| `x` | 32.00 (+2.00 [+1.00, +3.00], p_holm 0.040) | 31.00 (+1.00" in out
    assert "| `y` | 29.00 (-1.00 [-2.00, +0.00], p_holm 0.060)" in out
    assert "`z`" not in out
    # t1 means: b 30, x 32, y 29 against b 30, x 31, y 28: the same order
    assert out.count("Spearman de-en vs fr-en: +1.00 (3 cells)") == 1
    assert "Spearman de-en vs fr-en: -1.00 (3 cells)" in out  # t2: 30, 31, 29.5 vs 30, 29, 31
    # fr-en's family: 0.001, 0.5, 0.001, 0.5 -> .004, 1, .004, 1
    every = "keeps its sign, significant in every direction"
    assert f"`x` on t1: de-en +2.00, fr-en +1.00: {every}" in out
    assert "`x` on t2: de-en +1.00, fr-en -1.00: changes sign, significant in none" in out
    assert "`y` on t1: de-en -1.00, fr-en -2.00: keeps its sign, significant in fr-en" in out


def test_a_difference_significant_everywhere_is_said_so(load_script, monkeypatch, capsys, tmp_path):
    cells = {"b": {"t1": (30.0, None, None)}, "x": {"t1": (33.0, 3.0, 0.001)}}
    sweeps = [report(tmp_path / name, cells, tests=("t1",)) for name in ("a", "b", "c")]
    named = [f"{name}={s}" for name, s in zip(("de-en", "fr-en", "en-de"), sweeps, strict=True)]
    out = run(load_script, monkeypatch, capsys, *named)
    assert (
        "`x` on t1: de-en +3.00, fr-en +3.00, en-de +3.00: "
        "keeps its sign, significant in every direction" in out
    )


def test_too_few_seeds_decide_nothing_and_no_difference_has_no_sign(
    load_script, monkeypatch, capsys, tmp_path
):
    """The report's rule: a call needs 3 seeds on each side, whatever the p-value."""
    cells = {"b": {"t1": (30.0, None, None)}, "x": {"t1": (33.0, 3.0, 0.001)}}
    few = report(tmp_path / "few", cells, ("t1",), seeds={"x": "1 2"})
    full = report(tmp_path / "full", cells, ("t1",))
    out = run(load_script, monkeypatch, capsys, f"de-en={few}", f"fr-en={full}")
    assert "`x` on t1: de-en +3.00, fr-en +3.00: keeps its sign, significant in fr-en" in out
    none = report(tmp_path / "none", {**cells, "x": {"t1": (30.0, 0.0, 1.0)}}, ("t1",))
    out = run(load_script, monkeypatch, capsys, f"de-en={none}", f"fr-en={full}")
    assert "`x` on t1: de-en +0.00, fr-en +3.00: no difference in a direction" in out
    assert "Spearman de-en vs fr-en: undefined (the cells tie) (2 cells)" in out


@pytest.mark.parametrize(
    ("cells", "problem"),
    [
        ({"b": {"t1": (30.0, None, None)}}, "fewer than two cells"),
        ({"x": {"t1": (30.0, None, None)}, "b": {"t1": (30.0, 1.0, 0.5)}}, "baselines differ"),
        (
            {
                "z": {"t1": (30.0, None, None)},
                "b": {"t1": (30.0, 1.0, 0.5)},
                "x": {"t1": (1, 1, 1)},
            },
            "fr-en: its baseline is not among the cells every sweep has",
        ),
    ],
)
def test_sweeps_that_cannot_be_compared_are_refused_in_one_line(
    load_script, monkeypatch, capsys, tmp_path, cells, problem
):
    first = report(
        tmp_path / "one", {"b": {"t1": (30.0, None, None)}, "x": {"t1": (31.0, 1.0, 0.5)}}, ("t1",)
    )
    other = report(tmp_path / "two", cells, ("t1",))
    with pytest.raises(SystemExit, match=problem):
        run(load_script, monkeypatch, capsys, f"de-en={first}", f"fr-en={other}")
    with pytest.raises(SystemExit, match="no report; make it with `seq2seq sweep report SWEEP`"):
        run(load_script, monkeypatch, capsys, f"de-en={first}", f"fr-en={tmp_path}")
    with pytest.raises(SystemExit, match="give two directions or more"):
        run(load_script, monkeypatch, capsys, f"de-en={first}")
    with pytest.raises(SystemExit, match="give each direction once, as NAME=SWEEP"):
        run(load_script, monkeypatch, capsys, f"de-en={first}", f"de-en={other}")
    with pytest.raises(SystemExit, match="no column of metric 'BLEU'"):
        run(
            load_script, monkeypatch, capsys, f"de-en={first}", f"fr-en={other}", "--metric", "BLEU"
        )
