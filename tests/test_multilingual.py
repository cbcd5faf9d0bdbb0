"""Many language pairs in one run: each corpus's own pair, the target language's tag before
each source, sampling across corpora by temperature, validation and tests per pair, and
`--tgt-lang` (the server's and the API's `tgt_lang`) to choose the language."""

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from cli_helpers import run_cli, train
from prepared_helpers import fake_ids, write_prepared
from sweep_helpers import write_sweep

from seq2seq.checkpoint import load_checkpoint
from seq2seq.config import SourceTags, config_from_dict, load_config
from seq2seq.data.epoch_batches import CorpusWeights, TrainBatches, TrainingPairs
from seq2seq.decode.loading import load_trained_model
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError


def both_ways(toy, split: str) -> str:
    """A corpus of the toy task each way round: one model translates src->tgt and tgt->src."""
    path = toy / "data" / split
    return f"[{{path: {path}, src: src, tgt: tgt}}, {{path: {path}, src: tgt, tgt: src}}]"


@pytest.fixture(scope="module")
def two_way(toy, tmp_path_factory):
    """The toy task trained both ways in one model for 8 updates, picked by src-tgt's BLEU."""
    run_dir = tmp_path_factory.mktemp("multilingual") / "run"
    splits = [f"data.{split}={both_ways(toy, split)}" for split in ("train", "valid", "test")]
    sets = ["data.src=null", "data.tgt=null", *splits, "train.metric=src-tgt/bleu"]
    budget = ["train.max_steps=8", "train.valid_every=4", "decode.beam=1"]
    assert train(toy, run_dir, *sets, *budget) == 0
    return run_dir


DATA = {"src": "de", "tgt": "en", "train": "a", "valid": "v"}
PAIRS = {
    "train": [{"path": "c", "src": "fr", "tgt": "en"}, {"path": "c", "src": "en", "tgt": "de"}],
    "valid": [{"path": "v", "src": "fr", "tgt": "en"}, {"path": "v", "src": "en", "tgt": "de"}],
    "test": [{"path": "t", "src": "fr", "tgt": "en"}, {"path": "t", "src": "en", "tgt": "de"}],
}


def test_each_corpus_s_pair_gives_the_tags_and_names():
    cfg = config_from_dict({"data": PAIRS | {"tags": [None, "<bt>"]}})
    data = cfg.data
    assert data.target_languages == ["en", "de"] and data.tags_targets
    assert data.corpus_tags == [["<2en>"], ["<2de>", "<bt>"]]
    assert [data.test_name(corpus) for corpus in data.test] == ["t.fr-en", "t.en-de"]
    assert cfg.tokenizer.user_symbols == ["<2en>", "<2de>", "<bt>"]
    assert data.source_tags == SourceTags(("<bt>",), ("en", "de"), ("en", "de"))
    # One target language: no tag, unless asked for; and a single pair keeps its names.
    one = config_from_dict({"data": DATA | {"train": ["a", {"path": "b", "src": "fr"}]}}).data
    assert one.target_languages == ["en"] and one.corpus_tags == [[], []]
    assert one.multilingual and one.test_name("t") == "t.de-en"
    forced = config_from_dict({"data": DATA | {"target_tags": True}}).data
    assert forced.corpus_tags == [["<2en>"]] and not forced.multilingual
    assert forced.test_name("t") == "t"


@pytest.mark.parametrize(
    ("data", "changes", "error"),
    [
        ({"train": [{"path": "c", "src": "fr"}], "valid": "v"}, {},
         r"data.train \(c\) has no tgt language: give data.tgt, or tgt in its entry"),
        (DATA | {"valid": ["v", {"path": "w"}]}, {},
         "data.valid has two corpora of de-en; give one validation corpus per pair"),
        (DATA | {"train": [{"path": "c", "sorce": "fr"}]}, {},
         "unknown key 'data.train.0.sorce'; allowed here: src, tgt, path"),
        (PAIRS, {"train": {"metric": "de-fr/bleu"}},
         "names the pair de-fr, and data.valid's are fr-en, en-de: name one of them, or"),
        (DATA, {"train": {"metric": "de-en/bleu"}},
         r"data.valid has one corpus, scored without one: name the metric alone \(bleu\)"),
        (PAIRS, {"decode": {"tgt_lang": "fr"}}, "decode.tgt_lang fr is not a target language"),
        (DATA, {"decode": {"tgt_lang": "en"}}, r"give null \(it has one\)"),
        (PAIRS | {"valid_alignments": True}, {}, "data.valid_alignments scores the attention"),
        (DATA | {"temperature": 0}, {}, "data.temperature = 0: Input should be greater than 0"),
        (DATA | {"temperature": 2}, {}, "data.train has one: remove it"),
        (DATA | {"valid": []}, {}, r"data.valid = \[\]: an empty list; give at least one corpus"),
        (PAIRS | {"valid_alignments": False}, {"train": {"metric": "fr-en/aer"}},
         "train.metric fr-en/aer picks the checkpoint by the validation's alignment error"),
        (PAIRS | {"test": {"path": "t", "src": "fr", "tgt": "es"}}, {},
         r"data.test \(t\) is into es, and training translates into en, de alone"),
        (DATA | {"valid": {"path": "v", "src": "de", "tgt": "fr"}}, {},
         "data.valid .* is into fr, and training translates into en alone"),
        (DATA | {"train": [{"path": "c", "src": "en", "tgt": "en"}]}, {},
         r"data.train \(c\) translates en into en: give it two languages"),
        (PAIRS | {"tags": ["<2en>", None]}, {},
         "data.tags has <2en>, the tag of target language en"),
        ({"train": [{"path": "c.tsv", "src": "fr", "tgt": "en"},
                    {"path": "c.tsv", "src": "en", "tgt": "fr"}], "valid": PAIRS["valid"][:1]}, {},
         r"data.train\[1\]: c.tsv is read as fr-en and as en-fr, and a TSV file's columns"),
    ],
)  # fmt: skip
def test_bad_pair_specifications_are_one_line_each(data, changes, error):
    with pytest.raises(UserError, match=error):
        config_from_dict({"data": data} | changes)


def test_the_target_tag_is_chosen_required_or_refused():
    several, one = SourceTags(("<bt>",), ("en", "de"), ("en", "de")), SourceTags((), ("en",))
    assert several.pieces("<bt>", "de") == ["<2de>", "<bt>"]
    assert one.pieces(None, None) == [] and SourceTags((), ("en",), ("en",)).pieces(None, None)
    for tags, language, error in [
        (several, None, "this model translates into en, de: say which with --tgt-lang"),
        (several, "fr", "tgt_lang fr is not a language this model translates into; give one"),
        (one, "en", "tgt_lang en: this model translates into en alone, with no target-language"),
    ]:
        with pytest.raises(UserError, match=error):
            tags.pieces(None, language)


def test_temperature_weights_are_exact():
    kept = np.array([1000, 100, 10])
    sizes = kept * np.array([1.0, 2.0, 1.0])
    assert CorpusWeights([1, 2, 1]).of(kept) == [1, 2, 1]  # no temperature: as given
    assert CorpusWeights().of(kept) is None
    assert CorpusWeights([1, 2, 1], 1.0).of(kept) == [1, 2, 1]  # by size: as given, exactly
    weights = np.array(CorpusWeights([1, 2, 1], 5.0).of(kept))
    share = sizes ** (1 / 5) / (sizes ** (1 / 5)).sum()
    assert np.allclose(weights * kept, share * sizes.sum())  # the epoch's size kept
    assert weights[2] > weights[1] > weights[0]  # the small corpora drawn more often
    flat = np.array(CorpusWeights(None, 100.0).of(kept)) * kept
    assert flat.max() / flat.min() < 1.1  # near uniform
    assert CorpusWeights(None, 2.0).of(np.array([100, 0]))[1] == 1  # none kept: nothing to weigh


def test_an_epoch_holds_the_temperature_s_shares(tmp_path):
    big, small = fake_ids([3] * 90), fake_ids([4] * 10, seed=1)
    corpora = [
        write_prepared(tmp_path / name, ids, ids) for name, ids in (("b", big), ("s", small))
    ]
    batches = TrainBatches(TrainingPairs(corpora), 10, 100, seed=1, weights=CorpusWeights(None, 2))
    members = batches.mixture.members(torch.Generator().manual_seed(0))
    shares = np.bincount(members >= 90) / len(members)
    assert len(members) == 100 and np.allclose(shares, [0.75, 0.25])  # 90^0.5 : 10^0.5


def test_a_corpus_s_sources_start_with_its_tags(tmp_path):
    src = fake_ids([2, 3])
    corpora = [write_prepared(tmp_path / name, src, src) for name in ("a", "b")]
    pairs = TrainingPairs(corpora, [[5], [6, 7]])
    assert pairs.longest("src") == 5 and pairs.longest("tgt") == 3
    padded, lengths = pairs.padded("src", np.arange(4))
    rows = [row[:n].tolist() for row, n in zip(padded, lengths.tolist(), strict=True)]
    assert rows == [[5, *src[0]], [5, *src[1]], [6, 7, *src[0]], [6, 7, *src[1]]]


def test_a_multilingual_run_validates_and_tests_each_pair(two_way):
    summary = json.loads((two_way / "summary.json").read_text())
    last = summary["validations"][-1]
    pairs = ("src-tgt", "tgt-src")
    for key in ("bleu", "chrf", "loss"):
        assert last[key] == pytest.approx(np.mean([last[f"{pair}/{key}"] for pair in pairs]))
    best = max(summary["validations"], key=lambda record: record["src-tgt/bleu"])
    assert summary["best_src-tgt/bleu"] == best["src-tgt/bleu"]
    assert all((two_way / "valid" / f"step-8.{pair}.hyp").is_file() for pair in pairs)
    scores = json.loads((two_way / "test/scores.json").read_text())
    assert set(scores) == {"test.src-tgt", "test.tgt-src"}
    log = (two_way / "train.log").read_text()
    assert re.search(r"validation at step 8: BLEU .*\n.*  src-tgt: BLEU .*\n.*  tgt-src: BLEU", log)


def test_translating_names_the_target_language(two_way, toy, capsys):
    translator = Translator.load(two_way, beam=1)
    line = (toy / "data/test.src").read_text().splitlines()[0]
    found = translator.hypotheses([line], tgt_lang="tgt", attention=True)[0][0]
    assert found.tags == ("<2tgt>",) and "<2" not in found.text
    assert translator.attention_labels(line, found)[0][0] == "<2tgt>"
    assert translator.alignment(line, found)  # the tag's column is no word's
    with pytest.raises(UserError, match="translates into tgt, src: say which with --tgt-lang"):
        translator.translate([line])
    source = toy / "data/test.src"
    assert run_cli("translate", "--run", two_way, "--input", source, "--beam", "1") == 2
    assert "say which with --tgt-lang" in capsys.readouterr().err
    assert run_cli("translate", "--run", two_way, "--input", source, "--tgt-lang", "tgt") == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == Translator.load(two_way).translate([line], tgt_lang="tgt")[0]
    assert run_cli("evaluate", "--run", two_way, "--corpus", toy / "data/test") == 2
    assert "names a pair per corpus: give --src and --ref" in capsys.readouterr().err
    scored = ["--src", source, "--ref", toy / "data/test.tgt", "--tgt-lang", "tgt", "--json"]
    assert run_cli("evaluate", "--run", two_way, *scored) == 0
    found = json.loads(capsys.readouterr().out)
    expected = json.loads((two_way / "test/scores.json").read_text())["test.src-tgt"]
    assert found["bleu"] == expected["bleu"]


def test_a_shortlist_and_an_ensemble_member_of_other_tags_are_refused(two_way, monkeypatch):
    with pytest.raises(UserError, match="translates into tgt, src, and the shortlist's table"):
        Translator.load(two_way, shortlist=True).translate(["a b"], tgt_lang="tgt")
    from seq2seq.decode import ensemble

    loaded = []

    def untagged_second(run, checkpoint):  # the same run, read as if trained without tags
        origin, tokenizer, model = load_trained_model(run, checkpoint)
        if loaded:
            data = origin.config.data.model_copy(update={"target_tags": False})
            origin = replace(origin, config=origin.config.model_copy(update={"data": data}))
        loaded.append(run)
        return origin, tokenizer, model

    monkeypatch.setattr(ensemble, "load_trained_model", untagged_second)
    with pytest.raises(UserError, match="reads other tags before its sources than"):
        Translator.load([two_way, two_way])


def test_the_server_takes_a_target_language_per_request(two_way):
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    from fastapi.testclient import TestClient

    from seq2seq.serve.app import create_app
    from seq2seq.serve.schema import ServeLimits
    from seq2seq.serve.server import model_info

    translator, limits = Translator.load(two_way, beam=1), ServeLimits()
    with TestClient(create_app(translator, model_info(translator, limits), limits)) as client:
        info = client.get("/info").json()["languages"]
        assert info["pairs"] == [["src", "tgt"], ["tgt", "src"]]
        assert info["tgt_lang"] == ["tgt", "src"]
        answer = client.post("/translate", json={"text": ["a b"], "tgt_lang": "src"})
        texts = [line["text"] for line in answer.json()["translations"]]
        assert texts == translator.translate(["a b"], tgt_lang="src")
        refused = client.post("/translate", json={"text": ["a b"]})
        assert refused.status_code == 422 and "say which" in refused.json()["error"]


def test_a_single_pair_given_as_a_mapping_is_the_same_run(toy, six_steps, tmp_path):
    """The toy run with its corpora as {path, src, tgt} mappings and no data.src/data.tgt
    trains to the same weights, translations and scores as `six_steps`."""
    mapped = [
        f"data.{split}={{path: {toy / 'data' / split}, src: src, tgt: tgt}}"
        for split in ("train", "valid")
    ]
    test = f"data.test=[{{path: {toy / 'data/test'}, src: src, tgt: tgt}}]"
    sets = ["data.src=null", "data.tgt=null", *mapped, test, "train.max_steps=6"]
    assert train(toy, tmp_path / "run", *sets) == 0
    runs = (tmp_path / "run", six_steps)
    ours, theirs = (load_checkpoint(run / "checkpoints/last.pt")["model"] for run in runs)
    assert all(torch.equal(ours[name], theirs[name]) for name in theirs)
    for path in ("test/test.hyp", "valid/step-6.hyp", "test/scores.json"):
        assert (tmp_path / "run" / path).read_text() == (six_steps / path).read_text()


def test_a_sweep_reports_each_pair(toy, tmp_path, monkeypatch, undrawn_charts):
    monkeypatch.chdir(tmp_path)
    base = load_config(toy / "run.yaml").to_dict()
    base["data"] |= {"src": None, "tgt": None}
    for split in ("train", "valid", "test"):
        base["data"][split] = yaml.safe_load(both_ways(toy, split))
    settings = {"train.max_steps": 2, "train.threads": 1, "decode.beam": 1,
                "train.attention_diagnostics": True}  # fmt: skip
    path = write_sweep(
        tmp_path, base, grid={"model.attention.type": ["dot"]}, seeds=[1], set=settings
    )
    assert run_cli("sweep", "--config", path) == 0
    report = (tmp_path / "runs/sweeps/s/report/results.md").read_text()
    assert "test.src-tgt" in report and "test.tgt-src" in report


def test_the_shipped_multilingual_configs_name_their_pairs():
    root = Path(__file__).parent.parent / "configs/multilingual"
    many, one = (load_config(root / f"{name}.yaml").data for name in ("many_to_one", "one_to_many"))
    assert many.target_languages == ["en"] and not many.tags_targets
    assert one.source_tags.targets == ("cs", "de", "fr")
    assert [one.test_name(corpus) for corpus in one.test][:3] == [
        f"test_2016_flickr.en-{language}" for language in ("cs", "de", "fr")
    ]
