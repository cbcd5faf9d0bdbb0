import pytest
import torch

from seq2seq.checkpoint import RunDir, load_checkpoint, save_checkpoint, update_best
from seq2seq.errors import UserError


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
