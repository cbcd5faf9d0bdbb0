"""Ensembles: several models decode as one with the mean of their log-probabilities."""

import copy

import pytest
import torch
from cli_helpers import run_cli, train
from test_forced import pairs_batch
from test_search import ARCHS, tiny

from seq2seq.data.corpus import read_lines
from seq2seq.decode.ensemble import Ensemble
from seq2seq.decode.forced import forced_token_log_probs
from seq2seq.decode.search import loop
from seq2seq.decode.search.beams import SearchSettings, length_penalty
from seq2seq.decode.search.sampling import Sampler
from seq2seq.decode.search.strategy import BeamSearch
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError

SOURCES = [[5, 9, 12, 7, 22], [4, 6, 8], [11, 13]]
LIMITS = torch.tensor([9, 7, 5])


def search(model, strategy, settings=None):
    batch = pairs_batch(SOURCES, None)
    return loop.search(model, batch.src, batch.src_mask, LIMITS, strategy, settings)


def outputs(found):
    return [[(h.tokens, h.score, h.attention.tolist()) for h in hyps] for hyps in found]


@pytest.mark.parametrize("arch", ARCHS)
def test_an_ensemble_of_the_model_or_of_two_copies_of_it_decodes_as_the_model(arch):
    model = tiny(arch)
    sampler = Sampler.for_lines([0, 1, 2], 2, int(LIMITS.max()), 1, torch.device("cpu"))
    searches = [
        (BeamSearch(1), SearchSettings()),
        (BeamSearch(4), SearchSettings(nbest=2, alpha=1.0, no_repeat_ngram=2)),
        (sampler, SearchSettings(nbest=2)),
    ]
    for options in searches:
        alone = outputs(search(model, *options))
        assert outputs(search(Ensemble([model]), *options)) == alone  # exactly
        assert outputs(search(Ensemble([model, copy.deepcopy(model)]), *options)) == alone


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_an_ensemble_of_both_architectures_scores_the_mean_of_their_log_probabilities(alpha):
    rnn, transformer = tiny("rnn"), tiny("transformer")
    ensemble = Ensemble([rnn, transformer])
    found = search(ensemble, BeamSearch(3), SearchSettings(nbest=3, alpha=alpha))
    hyps = [(i, h) for i, hyps in enumerate(found) for h in hyps]
    pairs = pairs_batch([SOURCES[i] for i, _ in hyps], [h.tokens for _, h in hyps])
    lengths = [len(h.tokens) + 1 for _, h in hyps]
    forced = {
        m: forced_token_log_probs(m, pairs, lengths).sum(-1) for m in (ensemble, rnn, transformer)
    }
    assert forced[ensemble] == pytest.approx((forced[rnn] + forced[transformer]) / 2, abs=1e-5)
    for (i, h), total in zip(hyps, forced[ensemble].tolist(), strict=True):
        assert total / float(length_penalty(len(h.tokens) + 1.0, alpha)) == pytest.approx(
            h.score, abs=1e-4
        )
        assert h.attention.shape == (len(h.tokens) + 1, len(SOURCES[i]) + 1)  # the RNN's
    assert outputs(found) != outputs(
        search(rnn, BeamSearch(3), SearchSettings(nbest=3, alpha=alpha))
    )
    assert search(ensemble, BeamSearch(1))[0][0].tokens  # greedy too


def test_the_command_line_and_the_python_api_decode_with_an_ensemble(trained, toy, tmp_path):
    sources = read_lines(toy / "data/test.src")
    alone = Translator.load(trained, device="cpu", beam=3).translate(sources)
    assert Translator.load([trained, trained], device="cpu", beam=3).translate(sources) == alone
    int8 = Translator.load(trained, beam=3, int8=True).translate(sources)
    assert Translator.load([trained, trained], beam=3, int8=True).translate(sources) == int8
    mixed = Translator.load(trained, ["best", "init"], device="cpu", beam=3)
    source, out, aligned = tmp_path / "src.txt", tmp_path / "out.txt", tmp_path / "al.txt"
    source.write_text("\n".join(sources) + "\n")
    assert run_cli("translate", "--run", trained, "--checkpoint", "best", "--checkpoint",
                   "init", "-i", source, "-o", out, "--beam", "3", "--alignments", aligned,
                   "--device", "cpu") == 0  # fmt: skip
    assert out.read_text().splitlines() == mixed.translate(sources) != alone
    assert len(aligned.read_text().splitlines()) == len(sources)
    scores = [tmp_path / "one.tsv", tmp_path / "two.tsv"]
    for runs, output in (([trained], scores[0]), ([trained, trained], scores[1])):
        runs = [x for run in runs for x in ("--run", run)]
        assert run_cli("score", *runs, "--src", source, "--ref", out, "-o", output) == 0
    assert scores[0].read_text() == scores[1].read_text()
    with pytest.raises(UserError, match="attention diagnostics measure one model"):
        mixed.attention_diagnostics(sources, sources)
    with pytest.raises(UserError, match="run_dir is empty"):
        Translator.load([])


def test_ensembles_that_cannot_be_are_one_line(trained, toy, tmp_path, capsys):
    other = tmp_path / "other"
    assert train(toy, other, "train.max_steps=1", "tokenizer.vocab_size=100", "data.test=[]") == 0
    source = tmp_path / "src.txt"
    source.write_text("toto\n")
    translate = ("translate", "-i", source, "--run", trained)
    cases = [
        ((*translate, "--run", other), "other was trained with another tokenizer than"),
        ((*translate, "--engine", "ctranslate2", "--run", trained), "not an ensemble"),
        ((*translate, "--run", trained, "--checkpoint", "best", "--checkpoint", "last",
          "--checkpoint", "init"), "2 runs but 3 checkpoints"),
    ]  # fmt: skip
    capsys.readouterr()
    for args, fragment in cases:
        assert run_cli(*args) == 2
        err = capsys.readouterr().err.strip()
        assert fragment in err and len(err.splitlines()) == 1, err
