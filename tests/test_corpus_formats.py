"""Every kind of corpus source (a prefix of two files, TSV, JSON lines, a Hugging Face
dataset) reads the same pairs, prepares byte-identical corpora, and trains, validates,
tests and sweeps; what a source cannot read is one line naming the file and line."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from cli_helpers import run_cli, train
from sweep_helpers import FAST, write_sweep

from seq2seq.config import DatasetCorpus, TokenizerConfig
from seq2seq.data.corpus_encoder import prepare_corpus
from seq2seq.data.sources import corpus_source, read_corpus
from seq2seq.data.tokenizer import train_tokenizer
from seq2seq.errors import UserError
from seq2seq.sweep.directory import SweepDir
from seq2seq.sweep.reporting.results import collect
from seq2seq.sweep.running.runner import run_sweep
from seq2seq.sweep.spec import load_sweep

LANGS = ("de", "en")
# An empty side (left out of training), quotes, a tab-free backslash, non-ASCII text.
PAIRS = [
    (f"ein Satz {i} über „Straßen“ \\ {i % 7}", f"sentence {i} about roads") for i in range(60)
]
PAIRS[5] = ("", "nothing on the left")
PAIRS[9] = ("nichts rechts", "  ")


def write_prefix(path: Path, pairs=PAIRS) -> str:
    for lang, texts in zip(LANGS, zip(*pairs, strict=True), strict=True):
        Path(f"{path}.{lang}").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    return str(path)


def write_text(path: Path, text: str) -> str:
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return str(path)


def write_tsv(path: Path, pairs=PAIRS) -> str:
    return write_text(path, "".join(f"{s}\t{t}\n" for s, t in pairs))


def write_jsonl(path: Path, pairs=PAIRS, nested: bool = False) -> str:
    rows = [dict(zip(LANGS, pair, strict=True)) for pair in pairs]
    rows = [{"translation": row, "id": i} for i, row in enumerate(rows)] if nested else rows
    return write_text(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def hf_dataset(pairs=PAIRS, nested: bool = True):
    datasets = pytest.importorskip("datasets", reason="the hf extra is not installed")
    datasets.disable_progress_bars()
    if nested:
        return datasets.Dataset.from_dict(
            {"translation": [dict(zip(LANGS, pair, strict=True)) for pair in pairs]}
        )
    return datasets.Dataset.from_dict(
        {"source": [s for s, _ in pairs], "target": [t for _, t in pairs]}
    )


def saved_dataset(path: Path, pairs=PAIRS, split: str = "train") -> DatasetCorpus:
    datasets = pytest.importorskip("datasets", reason="the hf extra is not installed")
    datasets.DatasetDict({split: hf_dataset(pairs)}).save_to_disk(str(path))
    return DatasetCorpus(dataset=str(path), split=split)


def parquet_dataset(path: Path, pairs=PAIRS) -> DatasetCorpus:
    hf_dataset(pairs, nested=False).to_parquet(str(path))
    return DatasetCorpus(dataset=str(path), columns={"de": "source", "en": "target"})


def arrow_dataset(path: Path, pairs=PAIRS) -> DatasetCorpus:
    hf_dataset(pairs).save_to_disk(str(path))
    (arrow,) = path.glob("*.arrow")
    return DatasetCorpus(dataset=str(arrow))


FORMATS: dict[str, Callable[[Path], object]] = {
    "prefix": lambda d: write_prefix(d / "corpus"),
    "tsv": lambda d: write_tsv(d / "corpus.tsv"),
    "tsv.gz": lambda d: write_tsv(d / "corpus.tsv.gz"),
    "jsonl": lambda d: write_jsonl(d / "corpus.jsonl"),
    "jsonl translation": lambda d: write_jsonl(d / "corpus.jsonl.gz", nested=True),
    "saved dataset": lambda d: saved_dataset(d / "saved"),
    "parquet": lambda d: parquet_dataset(d / "corpus.parquet"),
    "arrow": lambda d: arrow_dataset(d / "arrow"),
}


@pytest.mark.parametrize("kind", FORMATS)
def test_every_format_reads_the_same_pairs_whole_and_in_chunks(tmp_path: Path, kind: str) -> None:
    source = corpus_source(FORMATS[kind](tmp_path))
    whole = source.read(LANGS)
    assert list(zip(whole.src, whole.tgt, strict=True)) == PAIRS
    chunks = list(source.chunks(LANGS, 7))
    kept = [pair for pair in PAIRS if pair[0].strip() and pair[1].strip()]
    assert [p for c in chunks for p in zip(c.src, c.tgt, strict=True)] == kept
    assert sum(chunk.empty for chunk in chunks) == 2
    assert source.name in (
        "corpus",
        "saved-train",
        "corpus.parquet-train",
        "data-00000-of-00001.arrow-train",
    )


def test_same_pairs_in_every_format_prepare_byte_identical_corpora(tmp_path: Path) -> None:
    tokenizer_dir = tmp_path / "tok"
    tokenizer = train_tokenizer(
        TokenizerConfig(vocab_size=60), [s for s, _ in PAIRS], [t for _, t in PAIRS], tokenizer_dir
    )
    prepared = {}
    for kind, make in FORMATS.items():
        where = tmp_path / kind.replace(" ", "-")
        where.mkdir()
        corpus = prepare_corpus(tokenizer, tokenizer_dir, corpus_source(make(where)), LANGS)
        prepared[kind] = {
            name: (corpus.directory / name).read_bytes()
            for name in ("src.ids", "src.offsets", "tgt.ids", "tgt.offsets")
        }
    assert len({json.dumps({k: v.hex() for k, v in p.items()}) for p in prepared.values()}) == 1
    assert len(prepared) == len(FORMATS) and prepared["prefix"]["src.ids"]


def test_a_prepared_dataset_is_prepared_again_when_its_files_change(tmp_path: Path) -> None:
    tokenizer_dir = tmp_path / "tok"
    tokenizer = train_tokenizer(
        TokenizerConfig(vocab_size=60), [s for s, _ in PAIRS], [t for _, t in PAIRS], tokenizer_dir
    )
    spec = saved_dataset(tmp_path / "saved")
    first = prepare_corpus(tokenizer, tokenizer_dir, corpus_source(spec), LANGS)
    assert first.pairs == 58
    saved_dataset(tmp_path / "saved", PAIRS[:20])
    again = prepare_corpus(tokenizer, tokenizer_dir, corpus_source(spec), LANGS)
    assert again.pairs == 18


def pairs_of(corpus, langs: tuple[str, str]) -> list[tuple[str, str]]:
    read = read_corpus(corpus, *langs)
    return list(zip(read.src, read.tgt, strict=True))


def toy_in_other_formats(toy: Path, where: Path) -> dict:
    """The toy run's config with its corpora in other formats: the training pairs in three
    parts, TSV, JSON lines and a saved dataset; the validation pairs in JSON lines; the test
    pairs in the saved dataset, in parquet and as the prefix they were."""
    datasets = pytest.importorskip("datasets", reason="the hf extra is not installed")
    cfg = yaml.safe_load((toy / "run.yaml").read_text())
    data = cfg["data"]
    langs = (data["src"], data["tgt"])

    def dataset(pairs: list) -> object:
        return datasets.Dataset.from_dict(
            {lang: [pair[i] for pair in pairs] for i, lang in enumerate(langs)}
        )

    def jsonl(path: Path, pairs: list) -> str:
        rows = [json.dumps(dict(zip(langs, pair, strict=True))) for pair in pairs]
        return write_text(path, "".join(row + "\n" for row in rows))

    train, test = pairs_of(data["train"], langs), pairs_of(data["test"][0], langs)
    parts = [train[: len(train) // 3], train[len(train) // 3 : 2 * len(train) // 3]]
    saved = {"train": dataset(train[2 * len(train) // 3 :]), "test": dataset(test)}
    datasets.DatasetDict(saved).save_to_disk(str(where / "saved"))
    saved["test"].to_parquet(str(where / "t.parquet"))
    data |= {
        "train": [
            write_tsv(where / "train.tsv.gz", parts[0]),
            jsonl(where / "train.jsonl", parts[1]),
            {"dataset": str(where / "saved")},
        ],
        "valid": jsonl(where / "valid.jsonl", pairs_of(data["valid"], langs)),
        "test": [
            {"dataset": str(where / "saved"), "split": "test", "name": "saved"},
            {"dataset": str(where / "t.parquet"), "split": "test"},
            data["test"][0],
        ],
    }
    return cfg


def test_a_run_trains_validates_and_tests_on_other_formats(toy: Path, tmp_path: Path) -> None:
    cfg = toy_in_other_formats(toy, tmp_path)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    assert train(tmp_path, run, "train.max_steps=4", "train.valid_every=2") == 0
    scores = json.loads((run / "test/scores.json").read_text())
    assert sorted(scores) == ["saved", "t.parquet-test", "test"]
    hypotheses = {name: (run / f"test/{name}.hyp").read_text() for name in scores}
    assert len(set(hypotheses.values())) == 1  # the same sentences, however given
    assert hypotheses["test"].count("\n") == 10
    summary = json.loads((run / "summary.json").read_text())
    assert [point["step"] for point in summary["validations"]] == [2, 4]
    prepared = sorted(p.name.split(".")[0] for p in (run / "tokenizer/corpora").iterdir())
    assert prepared == ["saved-train", "train", "train"]  # the three parts, each prepared


def test_a_sweep_reports_test_sets_of_other_formats(toy: Path, tmp_path: Path) -> None:
    base = toy_in_other_formats(toy, tmp_path)
    grid = {"model.attention.type": ["dot"]}
    base_file = str(tmp_path / "base.yaml")
    path = write_sweep(tmp_path, base, base=base_file, grid=grid, seeds=[1], set=FAST)
    run_sweep(load_sweep(path), tmp_path / "sweep")
    results = collect(SweepDir(tmp_path / "sweep"))
    assert results.test_sets == ["saved", "t.parquet-test", "test"]
    (cell,) = results.cells
    bleu = {name: cell.scores[name]["bleu"].observed for name in results.test_sets}
    assert len({tuple(b) for b in bleu.values()}) == 1


BAD_FILES = {
    "a TSV line without a tab": ("c.tsv", "a\tA\nb B\n", r"c.tsv, line 2: 0 tabs; a TSV corpus"),
    "a TSV line with two": ("c.tsv.gz", "a\tA\tx\n", r"c.tsv.gz, line 1: 2 tabs"),
    "a JSON line that is not JSON": (
        "c.jsonl",
        '{"de": "a", "en": "A"}\n{"de":\n',
        "line 2: not JSON",
    ),
    "a JSON line that is no object": ("c.jsonl", '["a", "A"]\n', "line 1: not a JSON object"),
    "a JSON line without a language": (
        "c.jsonl",
        '{"de": "a", "fr": "A"}\n',
        "line 1: no 'en' text",
    ),
    "a JSON line with a number": ("c.jsonl", '{"de": "a", "en": 3}\n', "line 1: a int for 'en'"),
    "a JSON text with a line break": (
        "c.jsonl",
        '{"de": "a\\nb", "en": "A"}\n',
        "de text holds a line",
    ),
    "a TSV file not there": ("elsewhere/c.tsv", None, "c.tsv: not found; check the path"),
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_a_file_that_cannot_be_read_is_one_line_naming_file_and_line(tmp_path, case):
    name, text, expected = BAD_FILES[case]
    path = tmp_path / name
    if text is not None:
        write_text(path, text)
    for read in (lambda s: s.read(LANGS), lambda s: list(s.chunks(LANGS, 1))):
        with pytest.raises(UserError, match=expected) as error:
            read(corpus_source(str(path)))
        assert "\n" not in str(error.value)


def test_a_dataset_without_the_split_or_columns_is_one_line(tmp_path: Path) -> None:
    spec = saved_dataset(tmp_path / "saved", split="validation")
    with pytest.raises(UserError, match=r"no split train \(splits: validation\); name one"):
        corpus_source(spec.model_copy(update={"split": "train"})).read(LANGS)
    columns = parquet_dataset(tmp_path / "p.parquet").model_copy(update={"columns": None})
    with pytest.raises(UserError, match=r"no column de \(columns: source, target\); name the"):
        list(corpus_source(columns).chunks(LANGS, 10))
    with pytest.raises(UserError, match="no such files; check its `dataset` path"):
        corpus_source(DatasetCorpus(dataset=str(tmp_path / "missing"))).read(LANGS)


def test_alignments_are_refused_for_a_corpus_that_is_no_prefix(tmp_path: Path) -> None:
    source = corpus_source(write_tsv(tmp_path / "c.tsv"))
    with pytest.raises(UserError, match=r"c.tsv: word alignments are read from \{prefix\}.align"):
        source.files(LANGS, aligned=True)


SAMPLE = Path(__file__).resolve().parent.parent / "data/sample"
SAMPLE_TEST = DatasetCorpus(dataset=str(SAMPLE / "test.parquet"), split="test")


def test_the_committed_sample_is_what_its_script_writes(load_script, tmp_path):
    pytest.importorskip("datasets", reason="the hf extra is not installed")
    written = load_script("make_sample_corpora").write_sample(tmp_path)
    assert sorted(path.name for path in written) == sorted(p.name for p in SAMPLE.iterdir())
    for path in written:
        if path.suffix == ".parquet":  # its bytes name the pyarrow that wrote it
            made = SAMPLE_TEST.model_copy(update={"dataset": str(path)})
            assert pairs_of(made, ("src", "tgt")) == pairs_of(SAMPLE_TEST, ("src", "tgt"))
        else:
            assert path.read_bytes() == (SAMPLE / path.name).read_bytes(), path.name


def test_the_sample_holds_the_same_pairs_in_every_format():
    pytest.importorskip("datasets", reason="the hf extra is not installed")
    langs = ("src", "tgt")
    train = [pairs_of(str(SAMPLE / name), langs) for name in ("train", "train.tsv", "train.jsonl")]
    assert train[0] == train[1] == train[2] and len(train[0]) == 300
    test = [pairs_of(str(SAMPLE / "test.tsv"), langs), pairs_of(SAMPLE_TEST, langs)]
    assert test[0] == test[1] and len(test[0]) == 30
    assert len(pairs_of(str(SAMPLE / "valid.jsonl"), langs)) == 30


def test_the_sample_config_trains_on_three_formats(tmp_path, monkeypatch):
    pytest.importorskip("datasets", reason="the hf extra is not installed")
    monkeypatch.chdir(SAMPLE.parent.parent)  # its paths are relative to the repository
    run = tmp_path / "run"
    sets = ["train.max_steps=4", "train.valid_every=2", "train.heatmaps=0", "train.threads=1"]
    args = [x for s in sets for x in ("--set", s)]
    assert run_cli("train", "configs/sample_formats.yaml", "--run-dir", run, *args) == 0
    assert sorted(json.loads((run / "test/scores.json").read_text())) == ["test", "test-parquet"]


def test_evaluate_reads_a_test_corpus_in_any_format(trained: Path, toy: Path, tmp_path, capsys):
    test = pairs_of(str(toy / "data/test"), ("src", "tgt"))
    corpus = write_tsv(tmp_path / "test.tsv", test)
    common = ["evaluate", "--run", trained, "--json", "--beam", 1]
    assert run_cli(*common, "--src", toy / "data/test.src", "--ref", toy / "data/test.tgt") == 0
    by_files = json.loads(capsys.readouterr().out)
    assert run_cli(*common, "--corpus", corpus) == 0
    assert json.loads(capsys.readouterr().out) == by_files
    assert run_cli(*common, "--corpus", corpus, "--ref", toy / "data/test.tgt") == 2
    assert "leave out --ref, --src, --hyp" in capsys.readouterr().err


def test_a_dataset_s_identity_is_what_it_reads_not_the_pair_it_is_read_as(tmp_path):
    pytest.importorskip("datasets", reason="the hf extra is not installed")
    spec = {"dataset": str(tmp_path / "set"), "split": "train"}
    plain = corpus_source(DatasetCorpus(**spec)).identity
    assert corpus_source(DatasetCorpus(**spec, src="de", tgt="en")).identity == plain
    assert corpus_source(DatasetCorpus(**spec | {"split": "test"})).identity != plain
