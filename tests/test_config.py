import pytest

from seq2seq.config import apply_override, config_differences, load_config, parse_duration
from seq2seq.errors import UserError

BASE = """
name: t
data: {src: de, tgt: en, train: a/train, valid: a/val}
model: {attention: {type: general}}
"""


def write(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_defaults_and_overrides(tmp_path):
    cfg = load_config(
        write(tmp_path, BASE),
        [
            "model.attention.type=dot",
            "train.max_steps=7",
            "train.max_time=1h30m",
            "data.test=[x, y]",
        ],
    )
    assert cfg.model.attention.type == "dot"
    assert cfg.train.max_steps == 7
    assert cfg.train.max_time == 5400.0
    assert cfg.data.test == ["x", "y"]
    assert cfg.model.hidden_dim == 128  # a default from the schema


@pytest.mark.parametrize(
    "override, fragments",
    [
        (
            "model.attention.type=magic",
            ["model.attention.type", "'magic'", "known: bahdanau, concat"],
        ),
        ("model.hiden_dim=3", ["unknown key 'model.hiden_dim'", "hidden_dim"]),
        ("model.dropout=1.5", ["model.dropout", "1.5", "less than 1"]),
        ("model.hidden_dim=abc", ["model.hidden_dim", "'abc'", "integer"]),
        ("model.hidden_dim=0", ["model.hidden_dim", "greater than 0"]),
        ("data.test=null", ["data.test = None", "[] for none"]),
        ("train.max_time=soon", ["train.max_time", "25m"]),
        ("model.cell=transformer", ["model.cell", "'lstm' or 'gru'"]),
        ("model.arch=cnn", ["model.arch", "'rnn' or 'transformer'"]),
        ("model.norm=middle", ["model.norm", "'pre' or 'post'"]),
        (
            "model={arch: transformer, embed_dim: 64}",
            ["embed_dim == hidden_dim", "64 and 128"],
        ),
        (
            "model={arch: transformer, embed_dim: 30, hidden_dim: 30}",
            ["attention.heads = 4 must divide hidden_dim = 30"],
        ),
        (
            "data.test=[a/flickr, b/flickr]",
            ["two test sets are named flickr (a/flickr, b/flickr)", "rename one"],
        ),
        (
            "model.self_attention.type=magic",
            ["model.self_attention.type", "'magic'", "known: bahdanau"],
        ),
    ],
)
def test_bad_values_name_field_value_and_allowed(tmp_path, override, fragments):
    with pytest.raises(UserError) as error:
        load_config(write(tmp_path, BASE), [override])
    message = str(error.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_shared_embeddings_need_a_joint_vocabulary(tmp_path):
    overrides = ["model.shared_embeddings=true", "tokenizer.joint=false"]
    with pytest.raises(UserError, match=r"model.shared_embeddings .*tokenizer.joint: true"):
        load_config(write(tmp_path, BASE), overrides)
    assert load_config(write(tmp_path, BASE), overrides[:1]).model.shared_embeddings


def test_missing_file_bad_yaml_and_missing_section(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(UserError, match="invalid YAML at line 2"):
        load_config(write(tmp_path, "a: 1\nb: c: d\n"))
    with pytest.raises(UserError, match="data: required field is missing"):
        load_config(write(tmp_path, "name: x\n"))


def test_override_syntax_errors():
    with pytest.raises(UserError, match="KEY=VALUE"):
        apply_override({}, "train.max_steps")
    with pytest.raises(UserError, match="not a section"):
        apply_override({"train": 3}, "train.max_steps=4")


def test_tied_embeddings_need_equal_sizes(tmp_path):
    with pytest.raises(UserError, match="embed_dim == hidden_dim"):
        load_config(write(tmp_path, BASE), ["model.tied_embeddings=true", "model.embed_dim=8"])


def test_yaml_round_trip_and_differences(tmp_path):
    cfg = load_config(write(tmp_path, BASE), ["train.max_time=25m"])
    again = load_config(write(tmp_path, cfg.to_yaml()))
    assert again == cfg
    other = load_config(write(tmp_path, cfg.to_yaml()), ["model.hidden_dim=64"])
    assert config_differences(cfg, other) == [("model.hidden_dim", 128, 64)]


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("25m", 1500), ("2h", 7200), (30, 30)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "-3", 0, True])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_extends_merges_sections_and_the_child_wins(tmp_path):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes/base.yaml").write_text(
        BASE + "train: {batch_tokens: 123, label_smoothing: 0.2}\n"
    )
    child = tmp_path / "recipes/child.yaml"
    child.write_text("extends: base.yaml\nname: c\ndata: {src: en, tgt: de}\n")
    cfg = load_config(child, ["train.batch_tokens=77"])
    assert (cfg.name, cfg.data.src, cfg.data.tgt) == ("c", "en", "de")
    assert cfg.data.train == "a/train"  # kept from the base, key by key
    assert cfg.model.attention.type == "general"
    assert (cfg.train.batch_tokens, cfg.train.label_smoothing) == (77, 0.2)


def test_extends_cycles_and_missing_parents_are_one_line_errors(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(UserError, match="leads back to itself"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("extends: nowhere.yaml\n")
    with pytest.raises(UserError, match=r"extends nowhere.yaml, which is not a file"):
        load_config(tmp_path / "c.yaml")


@pytest.mark.parametrize("name", ["transformer", "rnn"])
def test_the_en_de_recipes_are_the_de_en_ones_reversed(name):
    from pathlib import Path

    configs = Path(__file__).resolve().parent.parent / "configs"
    de_en = load_config(configs / f"multi30k_{name}.yaml")
    en_de = load_config(configs / f"multi30k_{name}_ende.yaml")
    assert (en_de.data.src, en_de.data.tgt) == (de_en.data.tgt, de_en.data.src)
    differences = {field for field, _, _ in config_differences(de_en, en_de)}
    assert differences == {"name", "data.src", "data.tgt"}


def test_a_config_of_the_default_attention_loads_in_a_fresh_process():
    """Nothing imported the attention package first (the test session does): the table of
    types fills itself, for the default type too, which no field validator asked about."""
    import subprocess
    import sys

    code = (
        "from seq2seq.config import config_from_dict\n"
        "cfg = config_from_dict({'data': {'src': 'a', 'tgt': 'b', 'train': 'x', 'valid': 'y'}})\n"
        "print(cfg.model.attention.type)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-1500:]
    assert done.stdout.strip() == "bahdanau"
