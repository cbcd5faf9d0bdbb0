from pathlib import Path

import pytest
import torch
import yaml

from seq2seq.checkpoint import (
    RunDir,
    average_checkpoints,
    load_checkpoint,
    load_model_weights,
    save_checkpoint,
    update_best,
)
from seq2seq.config import ModelConfig
from seq2seq.data.tokenizer import PAD_ID
from seq2seq.errors import UserError
from seq2seq.models import build_model

DATA = {"src": "de", "tgt": "en", "train": "train", "valid": "val"}


def test_round_trip_is_exact_and_weights_only(tmp_path):
    model = torch.nn.Linear(3, 2)
    state = {"model": model.state_dict(), "progress": {"step": 5, "best": [(1.5, 5)]}}
    path = tmp_path / "c" / "last.pt"
    save_checkpoint(path, state)
    loaded = load_checkpoint(path)
    assert loaded["progress"] == {"step": 5, "best": [(1.5, 5)]}
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded["model"][name], tensor)
    assert [p.name for p in path.parent.iterdir()] == ["last.pt"]  # no temp file left


def test_pickled_objects_are_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"x": object.__new__(RunDir)}, path)
    with pytest.raises(UserError, match="pickled objects"):
        load_checkpoint(path)


def test_truncated_checkpoint_is_a_clear_error(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"w": torch.zeros(1000)})
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(UserError, match="corrupt or truncated"):
        load_checkpoint(path)


def test_missing_checkpoint_names_run_dir(tmp_path):
    with pytest.raises(UserError, match="no checkpoint .*best.pt.*train it first"):
        RunDir(tmp_path).resolve_checkpoint("best")


def test_update_best_keeps_n_best():
    best: list[tuple[float, int]] = []
    dropped_all = []
    for step, score in enumerate([10.0, 12.0, 11.0, 9.0, 13.0], start=1):
        best, dropped = update_best(best, score, step, keep=2, higher_is_better=True)
        dropped_all += dropped
    assert best == [(13.0, 5), (12.0, 2)]
    assert dropped_all == [1, 4, 3]
    lowest, _ = update_best([(2.0, 1)], 1.0, 2, keep=1, higher_is_better=False)
    assert lowest == [(1.0, 2)]


def small_model(vocab: int = 12, **fields) -> tuple[ModelConfig, torch.nn.Module]:
    cfg = ModelConfig(**({"embed_dim": 8, "hidden_dim": 8} | fields))
    return cfg, build_model(cfg, vocab, vocab, PAD_ID)


def saved(cfg: ModelConfig, model: torch.nn.Module, with_config: bool = True) -> dict:
    config = {"model_config": cfg.model_dump(mode="json")} if with_config else {}
    return {"model": model.state_dict(), **config}


def misfit(state: dict, cfg: ModelConfig, model: torch.nn.Module) -> str:
    with pytest.raises(UserError) as error:
        load_model_weights(model, state, cfg, Path("run/best.pt"))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("checkpoint run/best.pt does not fit this model: ")
    return message


def test_model_weights_that_fit_are_loaded():
    cfg, model = small_model()
    _, other = small_model()
    load_model_weights(other, saved(cfg, model), cfg, Path("x.pt"))
    for name, tensor in model.state_dict().items():
        assert torch.equal(other.state_dict()[name], tensor)


def test_a_misfit_names_the_config_fields_that_differ():
    old_cfg, old = small_model(hidden_dim=16, attention={"type": "general"})
    cfg, model = small_model(dropout=0.1, attention={"type": "bahdanau"})
    message = misfit(saved(old_cfg, old), cfg, model)
    assert (
        "model.attention.type: checkpoint 'general', config 'bahdanau'; "
        "model.hidden_dim: checkpoint 16, config 8; "
        "use the run's own config.yaml or a checkpoint of this run"
    ) in message
    assert "dropout" not in message  # training only: the weights compute the same


def test_a_checkpoint_without_its_config_names_the_first_parameter_that_differs():
    old_cfg, old = small_model(hidden_dim=16)
    cfg, model = small_model()
    message = misfit(saved(old_cfg, old, with_config=False), cfg, model)
    assert (
        "encoder.rnn.weight_ih_l0 has shape (64, 8) in the checkpoint but (32, 8) here" in message
    )
    assert message.endswith("use the run's own config.yaml or a checkpoint of this run")


def test_same_config_other_vocabulary_blames_the_tokenizer():
    cfg, old = small_model(vocab=12)
    _, model = small_model(vocab=10)
    message = misfit(saved(cfg, old), cfg, model)
    assert (
        "the vocabulary differs at encoder.embed.weight (12 pieces in the checkpoint, 10" in message
    )
    assert message.endswith("use the tokenizer of the run that wrote it")


def test_missing_and_extra_parameters_are_named():
    dot_cfg, dot = small_model(attention={"type": "dot"})  # no parameters of its own
    general_cfg, general = small_model(attention={"type": "general"})
    lacking = misfit(saved(dot_cfg, dot, with_config=False), general_cfg, general)
    assert "the checkpoint lacks parameter decoder.attention.proj.weight;" in lacking
    extra = misfit(saved(general_cfg, general, with_config=False), dot_cfg, dot)
    assert "has parameter decoder.attention.proj.weight, which this model lacks;" in extra
    with pytest.raises(UserError, match="holds no model parameters"):
        load_model_weights(dot, {"step": 3}, dot_cfg, Path("x.pt"))


def test_average_keeps_the_model_config(tmp_path):
    cfg, model = small_model()
    paths = [tmp_path / "a.pt", tmp_path / "b.pt"]
    for path in paths:
        save_checkpoint(path, saved(cfg, model))
    averaged = average_checkpoints(paths)
    assert averaged["model_config"] == cfg.model_dump(mode="json")
    load_model_weights(small_model()[1], averaged, cfg, paths[0])


def test_test_hypotheses_are_test_name_hyp_or_the_older_test_name_tgt(tmp_path):
    run = RunDir(tmp_path)
    assert run.test_hypotheses("newstest") == tmp_path / "test/newstest.hyp"  # nothing yet
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"data": DATA}))
    (tmp_path / "test").mkdir()
    (tmp_path / "test/newstest.en").write_text("older\n")
    assert run.test_hypotheses("newstest") == tmp_path / "test/newstest.en"
    (tmp_path / "test/newstest.hyp").write_text("newer\n")
    assert run.test_hypotheses("newstest") == tmp_path / "test/newstest.hyp"
