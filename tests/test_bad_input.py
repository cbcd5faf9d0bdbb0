"""Every kind of bad input, through the real command line: exit status 2 and one line.

Each row of BAD_INPUT does one thing a user can get wrong (config, data, checkpoint,
arguments) and names fragments that the one error line must hold; what the rows build
(broken checkpoints, odd corpora) comes from bad_input_cases.py. Inputs that are odd
but translatable (empty, blank, very long, invalid UTF-8 lines) are the second table:
they translate, line-aligned, and stderr says what was done.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from bad_input_cases import (
    Given,
    alias_bomb,
    corpus_directory,
    corpus_fifo,
    foreign,
    no_checkpoint_yet,
    no_parameters,
    other_tokenizer,
    pickled,
    raw_pickle,
    set_hidden_dim,
    train_with,
    truncated,
)
from cli_helpers import run_cli, train

from seq2seq.config import config_from_dict
from seq2seq.decode.loading import max_source_pieces

LONG_PAIRS = 3  # training pairs over data.max_len (100 pieces) in the shared run's corpus


@pytest.fixture(scope="module")
def trained(toy, tmp_path_factory) -> Path:
    """A 2-step run on the toy corpus plus LONG_PAIRS pairs of over 100 words each."""
    root = tmp_path_factory.mktemp("bad_input")
    for side in ("src", "tgt"):
        lines = (toy / f"data/train.{side}").read_text().splitlines()
        long = " ".join([lines[0]] * 101)  # 101 words or more: over 100 pieces
        (root / f"train.{side}").write_text("\n".join(lines + [long] * LONG_PAIRS) + "\n")
    assert train(toy, root / "run", *trained_with(root)) == 0
    return root / "run"


def trained_with(root: Path) -> list[str]:
    """The overrides the `trained` run in ROOT/run was trained with."""
    return [f"data.train={root}/train", "train.max_steps=2"]


Row = tuple[str, Callable[[Given], int], list[str]]
BAD_INPUT: list[Row] = [
    # The config
    ("unknown key", train_with("colour=blue"), ["unknown key 'colour'", "allowed here: name"]),
    (
        "unknown nested key",
        train_with("model.hiden_dim=8"),
        ["unknown key 'model.hiden_dim'", "hidden_dim"],
    ),
    ("wrong type", train_with("train.batch_tokens=abc"), ["train.batch_tokens = 'abc'", "integer"]),
    ("zero size", train_with("model.hidden_dim=0"), ["model.hidden_dim = 0", "greater than 0"]),
    (
        "negative size",
        train_with("train.batch_tokens=-5"),
        ["train.batch_tokens = -5", "greater than 0"],
    ),
    (
        "heads do not divide the model size",
        train_with("model.attention.heads=3"),
        ["attention.heads = 3 must divide hidden_dim = 16"],
    ),
    (
        "unknown attention type",
        train_with("model.attention.type=magic"),
        ["model.attention.type = 'magic'", "known: bahdanau, concat"],
    ),
    (
        "unknown validation metric",
        train_with("train.metric=meteor"),
        ["train.metric = 'meteor'", "unknown metric 'meteor'; known: bleu, chrf, ter, loss"],
    ),
    (
        "unknown score of local attention",
        train_with("model.attention.type=local-p", "model.attention.score=magic"),
        ["model.attention.score = 'magic'", "allowed: bahdanau"],
    ),
    (
        "zero window",
        train_with("model.attention.window=0"),
        ["model.attention.window = 0", "greater than 0"],
    ),
    ("override without a value", train_with("train.max_steps"), ["expected KEY=VALUE"]),
    ("negative seed", train_with("seed=-1"), ["seed = -1", "greater than or equal to 0"]),
    ("seed over 32 bits", train_with("seed=99999999999"), ["seed = 99999999999", "4294967295"]),
    (
        "infinite learning rate",
        train_with("train.optimizer.lr=.inf"),
        ["train.optimizer.lr = inf", "finite number"],
    ),
    (
        "absurd learning rate",
        train_with("train.optimizer.lr=1.0e+30"),
        ["train.optimizer.lr = 1e+30", "less than or equal to 10"],
    ),
    *[
        (
            f"a flag for a number: {override}",  # pydantic would read true as 1
            train_with(override),
            [f"{override.split('=')[0]} = ", "flags, not numbers; give a number"],
        )
        for override in ("data.weights=[true]", "train.accumulate=true")
    ],
    (
        "a normalizer for no attention",
        train_with("model.attention.type=none", "model.attention.normalizer=sparsemax"),
        ["normalizer sparsemax would normalise nothing", "remove normalizer"],
    ),
    (
        "hard self-attention in the RNN",
        train_with("model.self_attention.normalizer=hard"),
        ["self_attention.normalizer: hard is not supported (the RNN has no self-attention)"],
    ),
    (
        "a schedule floor above the peak",  # would train at 500x the peak, silently
        train_with("train.optimizer.lr=0.002", "train.schedule.min_lr=1.0"),
        ["schedule.min_lr 1 is above optimizer.lr 0.002", "set min_lr below lr"],
    ),
    (
        "infinite output length ratio",
        train_with("decode.max_len_ratio=.inf"),
        ["decode.max_len_ratio = inf", "finite number"],
    ),
    (
        "absurd output length ratio",
        train_with("decode.max_len_ratio=1.0e+300"),
        ["decode.max_len_ratio = 1e+300", "less than or equal to 100"],
    ),
    (
        "an option the attention type does not read",
        train_with("model.attention.window=5"),
        ["bahdanau attention does not read window=5", "its options: heads"],
    ),
    (
        "YAML alias bomb",
        lambda g: run_cli("train", "--config", g.file("bomb.yaml", alias_bomb())),
        ["bomb.yaml", "YAML aliases (*name) expand to 234,567,909 values", "100,000 allowed"],
    ),
    (
        "a huge bad value is echoed short",
        train_with("model.dropout=" + "9" * 5000),
        ["model.dropout = '999", "... (5,002 characters)"],
    ),
    (
        "bad YAML",
        lambda g: run_cli("train", "--config", g.file("bad.yaml", "data: {src: de\n")),
        ["bad.yaml: invalid YAML at line 2"],
    ),
    (
        "config not a mapping",
        lambda g: run_cli("train", "--config", g.file("list.yaml", "- data\n")),
        ["list.yaml: the top level must be a mapping"],
    ),
    (
        "missing config file",
        lambda g: run_cli("train", "--config", g.tmp / "nope.yaml"),
        ["config file", "nope.yaml not found"],
    ),
    # The data
    (
        "missing training file",
        lambda g: train(g.toy, g.tmp / "run", f"data.train={g.tmp}/missing"),
        ["missing.src", "missing.src.gz", "check the prefix"],
    ),
    (
        "missing test set",
        lambda g: train(g.toy, g.tmp / "run", f"data.test=[{g.tmp}/nope]"),
        ["nope.src", "check the prefix"],
    ),
    (
        "mismatched line counts",
        lambda g: train(g.toy, g.tmp / "run", g.corpus(b"a\nb\nc\n", b"a\nb\n")),
        ["line counts differ", "x.src has 3 lines", "x.tgt has 2", "line-aligned"],
    ),
    (
        "empty corpus",
        lambda g: train(g.toy, g.tmp / "run", g.corpus(b"", b"")),
        ["empty corpus", "x.src and", "x.tgt have no lines"],
    ),
    (
        "every pair has an empty side",
        lambda g: train(g.toy, g.tmp / "run", g.corpus(b"a\n\n", b"\nb\n")),
        ["every training pair has an empty side"],
    ),
    (
        "corpus prefix naming a directory",
        lambda g: train(g.toy, g.tmp / "run", corpus_directory(g)),
        ["d/x.src is a directory, not a corpus file"],
    ),
    (
        "a UTF-16 training file",  # its lines split inside characters: not a count mismatch
        lambda g: train(g.toy, g.tmp / "run", g.corpus("a\nb\n".encode("utf-16"), b"a\nb\n")),
        ["x.src is UTF-16, not UTF-8", "re-encode the file as UTF-8"],
    ),
    (
        "corpus prefix naming a FIFO",
        lambda g: train(g.toy, g.tmp / "run", corpus_fifo(g)),
        ["f/x.src is not a regular file", "give the corpus as a file"],
    ),
    (
        "invalid UTF-8 in a training file",
        lambda g: train(g.toy, g.tmp / "run", g.corpus(b"fine\nbroken \xff\n", b"a\nb\n")),
        ["x.src, line 2: invalid UTF-8", "re-encode the file as UTF-8"],
    ),
    # Checkpoints and runs
    (
        "pickled object in a checkpoint",
        lambda g: g.translate("--checkpoint", pickled(g)),
        [
            "evil.pt holds pickled objects (pathlib.PurePosixPath), refused",
            "use a checkpoint written by seq2seq",
        ],
    ),
    (
        "raw pickle file as a checkpoint",
        lambda g: g.translate("--checkpoint", raw_pickle(g)),
        ["raw.pt is corrupt or truncated", "use another checkpoint"],
    ),
    (
        "checkpoint of another tokenizer",
        lambda g: g.translate("--checkpoint", other_tokenizer(g)),
        ["other.pt was trained with another tokenizer", "use it with the run that wrote it"],
    ),
    (
        "truncated checkpoint",
        lambda g: g.translate("--checkpoint", truncated(g)),
        ["cut.pt is corrupt or truncated", "use another checkpoint"],
    ),
    (
        "text file as a checkpoint",
        lambda g: g.translate("--checkpoint", g.file("notes.pt", "hello world\n")),
        ["notes.pt is corrupt or truncated", "use another checkpoint"],
    ),
    (
        "checkpoint without parameters",
        lambda g: g.translate("--checkpoint", no_parameters(g)),
        ["none.pt holds no model parameters", "use a checkpoint written by seq2seq"],
    ),
    (
        "config edited to another model shape",
        lambda g: run_cli("translate", "--run", g.run_copy(set_hidden_dim)),
        ["model.hidden_dim: checkpoint 16, config 8", "use the run's own config.yaml"],
    ),
    (
        "broken config.yaml in a run",
        lambda g: run_cli("translate", "--run", g.run_copy(lambda c: c.update(seed="x"))),
        ["copy/config.yaml: config error: seed = 'x'"],
    ),
    (
        "run without checkpoints",
        lambda g: run_cli("translate", "--run", no_checkpoint_yet(g)),
        ["no checkpoint", "best.pt", "train it first"],
    ),
    (
        "unknown checkpoint name",
        lambda g: g.translate("--checkpoint", "step-999"),
        ["no checkpoint", "step-999.pt"],
    ),
    (
        "resume with another model",
        lambda g: train(g.toy, g.run_copy(), *trained_with(g.trained.parent), "model.hidden_dim=8"),
        ["model.hidden_dim: 16 -> 8", "pass a new --run-dir"],
    ),
    (
        "average of another model's checkpoint",
        lambda g: run_cli(
            "average", "--run", g.trained, "--checkpoints", "best", "--checkpoints", foreign(g)
        ),
        ["foreign.pt does not match", "pick checkpoints of one run"],
    ),
    # Command-line arguments
    (
        "run directory that is a file",
        lambda g: train(g.toy, g.file("taken", "x")),
        ["Invalid value for '--run-dir'", "taken' is a file"],
    ),
    (
        "translate a directory that is not a run",
        lambda g: run_cli("translate", "--run", g.tmp),
        ["is not a run directory (no config.yaml)", "train one first"],
    ),
    (
        "nbest wider than the beam",
        lambda g: g.translate("--beam", "2", "--nbest", "3"),
        ["--beam 3"],
    ),
    ("beam 0", lambda g: g.translate("--beam", "0"), ["'--beam'", "greater than or equal to 1"]),
    (
        "negative length penalty",
        lambda g: g.translate("--length-penalty", "-1"),
        ["'--length-penalty'"],
    ),
    *[
        (
            f"{option} nan",  # as every other number option says it
            lambda g, option=option: g.translate(option, "nan"),
            [f"'{option}'", f"{option[2:].replace('-', '_')} = nan: Input should be a finite"],
        )
        for option in ("--length-penalty", "--coverage-penalty", "--group-diversity")
    ],
    ("unknown option", lambda g: g.translate("--bogus"), ["No such option: --bogus", "--help"]),
    ("output is a directory", lambda g: g.translate("-o", g.tmp), ["it is a directory"]),
    (
        "alignments is a directory",
        lambda g: g.translate("-o", g.tmp / "out", "--alignments", g.tmp),
        ["it is a directory"],
    ),
    (
        "average into a directory",
        lambda g: run_cli("average", "--run", g.trained, "--last", "1", "--output", g.tmp),
        ["it is a directory", "give a file name"],
    ),
    ("missing option", lambda g: run_cli("translate"), ["Missing option '--run'"]),
    (
        "missing input file",
        lambda g: run_cli("translate", "--run", g.trained, "-i", g.tmp / "none.txt"),
        ["none.txt: file not found"],
    ),
    (
        "references do not match the sources",
        lambda g: run_cli(
            "evaluate", "--run", g.tmp, "--src", g.file("s", "a\nb\n"), "--ref", g.file("r", "a\n")
        ),
        ["has 2 lines but", "has 1", "one reference per source line"],
    ),
    (
        "average without what to average",
        lambda g: run_cli("average", "--run", g.tmp),
        ["either --last N or --checkpoints"],
    ),
    (
        "average more checkpoints than kept",
        lambda g: run_cli("average", "--run", g.trained, "--last", "5"),
        ["--last 5 asks for more", "pass a smaller N"],
    ),
    (
        "plot the attention of nothing",
        lambda g: run_cli("plot-attention", "--run", g.trained, "--src", "  "),
        ["nothing to translate"],
    ),
]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].strip(), err
    assert "Traceback" not in lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "action, fragments", [r[1:] for r in BAD_INPUT], ids=[r[0] for r in BAD_INPUT]
)
def test_bad_input_is_one_line_and_exit_status_2(request, tmp_path, capsys, action, fragments):
    code = action(Given(request, capsys, tmp_path))
    line = one_error_line(capsys)
    assert code == 2
    assert line.startswith("seq2seq: error: ")
    for fragment in fragments:
        assert fragment in line


def test_a_max_len_that_drops_every_pair_is_an_error(toy, tmp_path, capsys):
    assert train(toy, tmp_path / "run", "data.max_len=1") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # The tokenizer is trained before lengths in pieces are known: its log line comes first.
    assert err.splitlines()[-1].endswith(
        "no training pair is at most 1 pieces long; raise data.max_len"
    )
    assert not (tmp_path / "run").exists()  # a failed start leaves no half-made run behind


def test_a_model_too_large_for_memory_is_one_line_and_leaves_nothing(toy, tmp_path, capsys):
    run = tmp_path / "a/b/run"  # a nested new directory: all of it goes
    assert train(toy, run, "model.hidden_dim=10000000") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.splitlines()[-1]  # after the tokenizer's log lines
    assert last.startswith("seq2seq: error: the model does not fit in memory")
    assert "hidden_dim=10000000" in last and "lower these sizes" in last
    assert list(tmp_path.iterdir()) == []


def test_pairs_over_max_len_are_dropped_and_counted(trained):
    log = (trained / "train.log").read_text()
    assert f"{LONG_PAIRS} longer than 100 pieces dropped" in log


@pytest.mark.parametrize(
    "model, limit",
    [
        ({}, 200),
        ({"attention": {"type": "location", "max_source_len": 50}}, 49),
        ({"self_attention": {"type": "location", "max_source_len": 50}}, 200),  # RNN: unused
    ],
)
def test_sources_are_cut_to_what_the_model_reads(model, limit):
    data = {"src": "de", "tgt": "en", "train": "t", "valid": "v", "max_len": 100}
    assert max_source_pieces(config_from_dict({"data": data, "model": model})) == limit


LONG_LINE = " ".join(["boka mimi toto tape podo"] * 1000)  # 5,000 words

ODD_LINES = [  # (line, fragments of stderr's one line about it or [], its output is empty)
    pytest.param(b"", [], True, id="empty"),
    pytest.param(b" \t ", [], True, id="whitespace only"),
    pytest.param(
        LONG_LINE.encode(),
        ["1 input line is longer than 200 pieces (line 2)", "cut to 200 pieces"],
        False,
        id="very long",
    ),
    pytest.param(
        b"toto \xff\xfe tape",
        ["1 input line is not valid UTF-8 (line 2)", "translated as empty", "re-encode"],
        True,
        id="invalid UTF-8",
    ),
]


@pytest.mark.parametrize("line, note, empty", ODD_LINES)
def test_odd_lines_translate_line_aligned(trained, tmp_path, capsys, line, note, empty):
    around = ["toto tape", "mimi podo"]
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_bytes(b"\n".join(s.encode() for s in around) + b"\n")
    assert run_cli("translate", "--run", trained, "-i", source, "-o", output) == 0
    alone = output.read_text().splitlines()

    source.write_bytes(b"%s\n%s\n%s\n" % (around[0].encode(), line, around[1].encode()))
    capsys.readouterr()
    assert run_cli("translate", "--run", trained, "-i", source, "-o", output) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    translated = output.read_text().split("\n")
    assert len(translated) == 4 and translated[-1] == ""  # three lines, each ending in \n
    assert [translated[0], translated[2]] == alone  # the neighbours are not shifted
    if empty:
        assert translated[1] == ""
    assert len(err.splitlines()) == (1 if note else 0), err
    assert all(fragment in err for fragment in note)
