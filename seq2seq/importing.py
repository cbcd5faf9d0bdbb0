"""`seq2seq import`: a Marian model in the Hugging Face format (OPUS-MT's: config.json,
model.safetensors or pytorch_model.bin, source.spm, target.spm, vocab.json; a directory, or
a hub name fetched where the network allows) written as an ordinary run directory, which
translates, scores, serves, exports and fine-tunes as any.

Marian's Transformer is this project's with post-norm layers, SiLU feed-forward layers,
biases in every projection and a final logits bias, one embedding for both sides and the
output layer (model.norm, ffn_activation, attention.bias, output_bias,
shared_embeddings, tied_embeddings). Two things are renumbered, exactly: the vocabulary,
whose pieces keep Marian's order after this project's special ids (<pad> 0, <unk> 1, <s>
2, </s> 3: Marian's decoder starts from <pad>, so <s> is its <pad> too; both are never
written, as Marian's generation bans <pad>), and the model's dimensions, since Marian's
sinusoids put all sines before all cosines where this project interleaves them: dimension
2i is Marian's i and 2i + 1 its d/2 + i, in every weight that reads or writes the model's
width (a reordering of the same function)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
import yaml
from pydantic import ValidationError
from torch import Tensor

from seq2seq.checkpoint import RunDir, save_checkpoint
from seq2seq.config import Config, describe_validation_error
from seq2seq.config.tokenizer import SPECIAL_PIECES
from seq2seq.data.tokenizer import SETTINGS, SRC_MODEL, TGT_MODEL, Tokenizer
from seq2seq.data.vocabulary import VOCABULARY
from seq2seq.errors import UserError
from seq2seq.files import publish_directory
from seq2seq.models import build_model

# The logit bias of <pad> and <s>, never written: a "minus infinity" that float16 holds
# (its largest is 65,504) and that label smoothing's mean over the vocabulary, which counts
# every piece, barely notices when the imported model is fine-tuned (1e4 / V nats).
NEVER = -1e4
ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu"}
FILES = ("config.json", "source.spm", "target.spm", "vocab.json")


def import_marian(source: Path, run_dir: Path, src: str, tgt: str) -> Config:
    """Write the Marian model in `source` as the run `run_dir` (translating `src` into
    `tgt`); one line for a file missing, an architecture or option this project has no
    equivalent for, or a vocabulary that disagrees with its SentencePiece models."""
    source = _local(source)
    for name in FILES:
        if not (source / name).is_file():
            raise UserError(
                f"{source} has no {name}: not a Marian model in the Hugging Face format"
            )
    marian = json.loads((source / "config.json").read_text(encoding="utf-8"))
    vocab = json.loads((source / "vocab.json").read_text(encoding="utf-8"))
    try:
        settings = _config(marian, src, tgt)
        order = _id_order(vocab, marian)
    except KeyError as missing:
        raise UserError(
            f"{source / 'config.json'} has no {missing}: not a whole Marian config"
        ) from None
    by_id = _pieces_by_id(vocab)
    pieces = [*SPECIAL_PIECES, *(by_id[number] for number in order[len(SPECIAL_PIECES) :])]
    if run_dir.exists():
        raise UserError(f"{run_dir} exists; pass a new --run-dir")

    def write(tmp: Path) -> None:
        run = RunDir(tmp)
        run.tokenizer.mkdir(parents=True)
        shutil.copyfile(source / "source.spm", run.tokenizer / SRC_MODEL)
        shutil.copyfile(source / "target.spm", run.tokenizer / TGT_MODEL)
        (run.tokenizer / VOCABULARY).write_text(json.dumps(pieces), encoding="utf-8")
        (run.tokenizer / SETTINGS).write_text(json.dumps(settings.tokenizer.model_dump()))
        tokenizer = Tokenizer.load(run.tokenizer)  # checks the table against the models
        model = build_model(settings.model, len(pieces), len(pieces), 0)
        _load(model, _weights(source), marian, order)
        run.checkpoints.mkdir()
        state = {"model": model.state_dict(), "tokenizer": tokenizer.fingerprint, "step": 0}
        save_checkpoint(run.checkpoint("best"), state | {"model_config": _dumped(settings)})
        run.config.write_text(yaml.safe_dump(settings.to_dict(), sort_keys=False))

    publish_directory(run_dir, write, new=True)
    return settings


def _local(source: Path) -> Path:
    """The model's directory: `source` itself, or a hub name (Helsinki-NLP/opus-mt-de-en)
    downloaded by huggingface_hub where it is installed and the network allows."""
    if source.is_dir() or len(source.parts) != 2:
        return source
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UserError(
            f"{source} is no directory, and fetching it from the hub needs huggingface_hub: "
            "pip install huggingface_hub, or give the model's downloaded directory"
        ) from None
    patterns = [*FILES, "model.safetensors", "pytorch_model.bin"]
    try:
        return Path(snapshot_download(str(source), allow_patterns=patterns))
    except Exception as error:  # offline, unknown repository, refused: all say why
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UserError(
            f"{source}: no such directory, and the hub did not give it ({reason}); download "
            "the model's directory and give its path"
        ) from None


def _dumped(settings: Config) -> dict[str, Any]:
    return settings.model.model_dump(mode="json")


def _config(marian: dict, src: str, tgt: str) -> Config:
    """This project's config of the model; one line for what it cannot be."""
    if marian.get("model_type") != "marian":
        raise UserError(
            f"model_type {marian.get('model_type')!r}: seq2seq import reads Marian models "
            "(model_type marian: OPUS-MT's and the like)"
        )
    activation = _activation(marian)
    heads = marian["encoder_attention_heads"]
    model = {
        "arch": "transformer",
        "embed_dim": marian["d_model"],
        "hidden_dim": marian["d_model"],
        "ff_dim": marian["encoder_ffn_dim"],
        "encoder_layers": marian["encoder_layers"],
        "decoder_layers": marian["decoder_layers"],
        "norm": "post",
        "ffn_activation": activation,
        "scale_embedding": bool(marian.get("scale_embedding", False)),  # transformers' default
        "output_bias": True,
        "dropout": marian.get("dropout", 0.1),
        "tied_embeddings": True,
        "shared_embeddings": True,
        "attention": {"type": "multihead", "heads": heads, "bias": True},
        "self_attention": {"type": "scaled-dot", "heads": heads, "bias": True},
    }
    data = {"src": src, "tgt": tgt, "train": "imported", "valid": "imported"}
    # Translation reads sources of up to 2 x max_len pieces (and their </s>): Marian's own
    # limit, its position table.
    data["max_len"] = (marian.get("max_position_embeddings", 512) - 1) // 2
    beam = {"beam": min(marian.get("num_beams") or 4, 16), "length_penalty": 1.0}
    # one vocabulary (a table) for both languages, segmented by a model each
    tokenizer = {"joint": True, "vocab_size": marian["vocab_size"] + 1}
    given = {"name": "imported", "data": data, "model": model, "tokenizer": tokenizer}
    try:
        return Config.model_validate(given | {"decode": beam})
    except ValidationError as error:
        problem = describe_validation_error(error)
        raise UserError(f"this Marian model is none seq2seq builds ({problem})") from None


def _activation(marian: dict) -> str:
    """This project's name of the model's activation, once every option is one this
    project has; one line naming the first that is not."""
    activation = ACTIVATIONS.get(marian.get("activation_function", "gelu"))  # transformers'

    lacking = {
        "heads that differ between encoder and decoder": (
            marian["encoder_attention_heads"] != marian["decoder_attention_heads"]
        ),
        "feed-forward sizes that differ between encoder and decoder": (
            marian["encoder_ffn_dim"] != marian["decoder_ffn_dim"]
        ),
        "a target vocabulary of its own (decoder_vocab_size)": (
            marian.get("decoder_vocab_size") not in (None, marian["vocab_size"])
        ),
        "separate source and target embeddings": (
            not marian.get("share_encoder_decoder_embeddings", True)
        ),
        "pre-norm layers (normalize_before)": marian.get("normalize_before", False),
        "an output layer of its own (tie_word_embeddings false)": (
            not marian.get("tie_word_embeddings", True)
        ),
        "a decoder that starts from another token than <pad> (decoder_start_token_id)": (
            marian.get("decoder_start_token_id", marian["pad_token_id"]) != marian["pad_token_id"]
        ),
        f"the activation {marian.get('activation_function')!r}": activation is None,
    }
    found = next((what for what, present in lacking.items() if present), None)
    if found is not None:
        raise UserError(f"this Marian model has {found}, which seq2seq has no equivalent of")
    return activation  # type: ignore[return-value]


def _pieces_by_id(vocab: dict[str, int]) -> dict[int, str]:
    return {number: piece for piece, number in vocab.items()}


def _id_order(vocab: dict[str, int], marian: dict) -> list[int]:
    """Marian's id of each of this project's ids: <pad>, <unk>, <pad> again as <s>, </s>,
    then every other piece in Marian's order; one line for a table without its specials
    or with an id twice."""
    pad, eos = marian["pad_token_id"], marian["eos_token_id"]
    unk = vocab.get("<unk>")
    numbers = sorted(vocab.values())
    if unk is None or numbers != list(range(len(numbers))) or len(numbers) != marian["vocab_size"]:
        raise UserError(
            f"vocab.json does not number {marian['vocab_size']} pieces 0 to "
            f"{marian['vocab_size'] - 1} once each with an <unk>: not this model's vocabulary"
        )
    return [pad, unk, pad, eos, *(n for n in numbers if n not in (pad, unk, eos))]


def _weights(source: Path) -> dict[str, Tensor]:
    """The model's tensors: model.safetensors, else pytorch_model.bin."""
    if (source / "model.safetensors").is_file():
        from safetensors.torch import load_file

        return load_file(str(source / "model.safetensors"))
    if (source / "pytorch_model.bin").is_file():
        return torch.load(source / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise UserError(f"{source} has no model.safetensors or pytorch_model.bin: no weights")


# Each layer's tensors: (Marian's name, this project's, how its model dimensions lie).
_ATTENTION = [
    (f"{proj}_proj", f"{name}_proj", kind)
    for proj, name, kind in (
        ("q", "query", "reads"),
        ("k", "key", "reads"),
        ("v", "value", "reads"),
        ("out", "out", "writes"),
    )
]
_LAYERS = {
    "encoder": [
        *((f"self_attn.{a}", f"self_attention.{b}", k) for a, b, k in _ATTENTION),
        ("self_attn_layer_norm", "attention_block.norm", "norm"),
        ("fc1", "feed_forward.0", "reads"),
        ("fc2", "feed_forward.3", "writes"),
        ("final_layer_norm", "feed_forward_block.norm", "norm"),
    ],
    "decoder": [
        *((f"self_attn.{a}", f"self_attention.{b}", k) for a, b, k in _ATTENTION),
        ("self_attn_layer_norm", "self_attention_block.norm", "norm"),
        *((f"encoder_attn.{a}", f"cross_attention.{b}", k) for a, b, k in _ATTENTION),
        ("encoder_attn_layer_norm", "cross_attention_block.norm", "norm"),
        ("fc1", "feed_forward.0", "reads"),
        ("fc2", "feed_forward.3", "writes"),
        ("final_layer_norm", "feed_forward_block.norm", "norm"),
    ],
}


def _placed(tensor: Tensor, part: str, kind: str, dims: Tensor) -> Tensor:
    """A tensor with the model's dimensions in this project's order: the columns of a
    matrix that reads them, the rows (and bias) of one that writes them, a norm's."""
    if kind == "reads":
        return tensor[:, dims] if part == "weight" else tensor
    return tensor[dims]


def _load(
    model: torch.nn.Module, weights: dict[str, Tensor], marian: dict, order: list[int]
) -> None:
    """Marian's `weights` into `model`, renumbered (the module's docstring); one line for
    a tensor missing, or one this project's model has no place for."""
    width = marian["d_model"]
    half = torch.arange(width // 2)
    dims, ids = torch.stack([half, half + width // 2], 1).flatten(), torch.tensor(order)
    shared = weights.get("model.shared.weight", weights.get("model.encoder.embed_tokens.weight"))
    if shared is None:
        raise UserError("the weights hold no embeddings (model.shared.weight): not a Marian model")
    output = weights.get("lm_head.weight")
    if output is not None and not torch.equal(output, shared):
        own = "an output layer of its own (lm_head), not its embeddings"
        raise UserError(f"this Marian model has {own}, which seq2seq has no equivalent of")
    embedding = shared[ids][:, dims]
    bias = weights.get("final_logits_bias", torch.zeros(1, len(order) - 1))[0][ids].clone()
    bias[[0, 2]] = NEVER
    mapped = {"output.bias": bias} | dict.fromkeys(
        ("src_embed.tokens.weight", "tgt_embed.tokens.weight", "output.weight"), embedding
    )
    for stack in ("encoder", "decoder"):
        for layer in range(marian[f"{stack}_layers"]):
            for theirs, ours, kind in _LAYERS[stack]:
                for part in ("weight", "bias"):
                    name = f"model.{stack}.layers.{layer}.{theirs}.{part}"
                    if name not in weights:
                        raise UserError(f"the weights lack {name}: not a Marian model this reads")
                    target = f"{stack}_layers.{layer}.{ours}.{part}"
                    mapped[target] = _placed(weights[name], part, kind, dims)
    missing, unexpected = model.load_state_dict(mapped, strict=False)
    if unexpected or set(missing) - {"length_ratio"}:
        raise UserError(
            f"the Marian weights do not fit ({', '.join([*unexpected, *missing][:3])}): "
            "a Marian variant this does not read"
        )
