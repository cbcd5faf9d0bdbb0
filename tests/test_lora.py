"""LoRA fine-tuning (`train.lora`): only the adapters train, merged and unmerged models
compute the same, checkpoints hold the adapters and name their base, translation reads
the merged weights, a resumed run equals a straight one, and bad settings are one line."""

import shutil

import pytest
import torch
from cli_helpers import train, train_straight_and_resumed

from seq2seq.checkpoint import load_checkpoint, merged_weights
from seq2seq.config import LoraConfig, ModelConfig, config_from_dict
from seq2seq.data.padded_batches import padding_mask
from seq2seq.decode.translate import Translator
from seq2seq.errors import UserError
from seq2seq.models import build_model
from seq2seq.models.lora import LoraLinear, add_adapters, merged, weights_state

SETTINGS = LoraConfig(rank=2, alpha=4, targets=["q", "v", "ffn"])


def adapted_transformer() -> torch.nn.Module:
    sizes = {"embed_dim": 16, "hidden_dim": 16, "ff_dim": 32, "encoder_layers": 1}
    cfg = ModelConfig(
        arch="transformer", decoder_layers=1, attention={"type": "multihead"}, **sizes
    )
    torch.manual_seed(0)
    model = build_model(cfg, 30, 30, pad_id=0)
    add_adapters(model, SETTINGS)
    return model


def batch():
    src = torch.randint(4, 30, (3, 5))
    return src, padding_mask(torch.tensor([5, 4, 2]), 5), torch.randint(4, 30, (3, 6))


def test_only_the_adapters_train():
    model = adapted_transformer().train()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trained, lr=0.05)
    for _ in range(3):
        optimizer.zero_grad()
        model(*batch()).logsumexp(-1).mean().backward()
        optimizer.step()
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    adapters = {name for name in before if name.endswith(("lora_a", "lora_b"))}
    assert changed == adapters
    # q and v of three attention modules, the two linear layers of two feed-forwards
    assert sum(isinstance(m, LoraLinear) for m in model.modules()) == 3 + 3 + 4


def test_merged_and_unmerged_models_compute_the_same():
    model = adapted_transformer().eval()
    for module in model.modules():
        if isinstance(module, LoraLinear):
            torch.nn.init.normal_(module.lora_b)  # an update that is not zero
    inputs = batch()
    with torch.no_grad():
        unmerged = model(*inputs)
        state = weights_state(model, SETTINGS)
        base = {k: v for k, v in model.state_dict().items() if k not in state["model"]}
        weights = merged_weights(base, state["model"], state["lora"]["scale"])
        plain = merged(model)
        assert not any(isinstance(m, LoraLinear) for m in plain.modules())
        torch.testing.assert_close(plain(*inputs), unmerged, rtol=1e-5, atol=1e-5)
    assert all(torch.equal(weights[name], tensor) for name, tensor in plain.state_dict().items())


LORA = ("train.lora={rank: 2, alpha: 4, targets: [q, k]}", "train.valid_every=2")  # the RNN's


def test_a_lora_run_keeps_its_adapters_resumes_exactly_and_translates_merged(
    toy, trained, tmp_path
):
    straight, resumed = train_straight_and_resumed(
        toy, tmp_path, f"train.init_from={trained}", *LORA, steps=4, stop=2
    )
    ours, theirs = (load_checkpoint(run / "checkpoints/last.pt") for run in (straight, resumed))
    assert ours["model"].keys() == theirs["model"].keys()
    assert all(torch.equal(ours["model"][k], theirs["model"][k]) for k in ours["model"])
    assert all(k.endswith(("lora_a", "lora_b")) for k in ours["model"])  # the adapters alone
    base = load_checkpoint(straight / "checkpoints/base.pt")["model"]
    parent = load_checkpoint(trained / "checkpoints/best.pt")["model"]
    assert all(torch.equal(base[k], parent[k]) for k in parent)  # the frozen weights
    state = load_checkpoint(straight / "checkpoints/best.pt")
    expected = merged_weights(base, state["model"], state["lora"]["scale"])
    loaded = Translator.load(straight, device="cpu").model.state_dict()
    assert all(torch.equal(loaded[k], expected[k]) for k in loaded)
    assert any(not torch.equal(expected[k], base[k]) for k in base)  # it learned something
    shutil.copyfile(straight / "checkpoints/best.pt", straight / "checkpoints/base.pt")
    with pytest.raises(UserError, match="as its base, which holds adapters itself"):
        Translator.load(straight)


def test_bad_lora_settings_are_one_line_each(toy, trained, tmp_path, capsys):
    data = {"src": "de", "tgt": "en", "train": "a", "valid": "v"}
    with pytest.raises(
        UserError, match="train.lora adapts a trained model .* give train.init_from"
    ):
        config_from_dict({"data": data, "train": {"lora": {"rank": 2}}})
    with pytest.raises(UserError, match="train.lora.rank = 0: Input should be greater than"):
        config_from_dict({"data": data, "train": {"lora": {"rank": 0}, "init_from": "r"}})
    twice = {"lora": {"targets": ["q", "q"]}, "init_from": "r"}
    with pytest.raises(UserError, match="a target is given twice; give each once"):
        config_from_dict({"data": data, "train": twice})
    no_ffn = ["train.lora={targets: [ffn]}", f"train.init_from={trained}"]  # an RNN
    assert train(toy, tmp_path / "run", *no_ffn) == 2
    assert "train.lora.targets: ffn adapts feed_forward.0 or feed_forward.3, and this model" in (
        capsys.readouterr().err
    )
