"""Export a trained Transformer run to a CTranslate2 model directory.

CTranslate2 implements the Transformer with multi-head scaled dot-product attention; a
run is exportable when its architecture and both attention sections are that. The
directory holds what CTranslate2 reads (model.bin, vocabularies, config.json), the run's
SentencePiece models and decoding settings (`seq2seq.json`) for `seq2seq translate
--engine ctranslate2`, and a README.

Weights map one to one, with two details: CTranslate2 fuses the self-attention query,
key and value projections (and the cross-attention key and value projections) into one
matrix, and it is given this model's own position table (sin and cos interleaved), not
its built-in one (sin and cos in halves).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import torch

from seq2seq.attention import Attention, attention_names, build_attention
from seq2seq.attention.positions import position_type
from seq2seq.checkpoint import RunDir
from seq2seq.config import AttentionConfig, Config
from seq2seq.data.corpus_encoder import DERIVED
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decode.loading import load_trained_model, max_source_pieces
from seq2seq.errors import UserError
from seq2seq.files import publish_directory
from seq2seq.models.blocks import GATED, NORM_EPS, FeedForward
from seq2seq.models.build import ARCHITECTURES
from seq2seq.models.transformer import TransformerSeq2Seq, sinusoids

QUANTIZATIONS = ("float32", "int16", "int8")
SETTINGS = "seq2seq.json"  # decoding settings and the source limit, for translate
TOKENIZER = "tokenizer"


def require_ctranslate2() -> None:
    """Fail with the fix before any work when the optional extra is not installed."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise UserError(
            "CTranslate2 is not installed: pip install -e '.[export]' (make install does)"
        ) from None


def unexportable(cfg: Config) -> str | None:
    """Why CTranslate2 cannot run this model (the field and its value), or None. The
    attention modules say themselves whether they are the multi-head scaled dot product
    CTranslate2 implements: each section is asked through a module built as the model
    builds it (with one dimension per head, so it costs nothing)."""
    model = cfg.model
    if not issubclass(ARCHITECTURES[model.arch], TransformerSeq2Seq):
        return f"model.arch is {model.arch}; CTranslate2 runs Transformer models only"
    if not position_type(model.positions).exportable:
        return (
            f"model.positions is {model.positions}; the exported Transformer adds sinusoidal "
            "positions: translate with the PyTorch engine instead"
        )
    sections = model.attention_sections()
    for name, section in sections.items():
        if section.normalizer != "softmax":
            return (
                f"model.{name}.normalizer is {section.normalizer}; CTranslate2 computes "
                "softmax attention only: translate with the PyTorch engine instead"
            )
        heads = model.heads(section)
        if not _attention(section, heads).is_multi_head_scaled_dot:
            runnable = [
                kind
                for kind in attention_names()
                if _attention(AttentionConfig(type=kind), heads).is_multi_head_scaled_dot
            ]
            return (
                f"model.{name}.type is {section.type} with {heads} head(s); CTranslate2 "
                "implements multi-head scaled dot-product attention only: with "
                f"{heads} head(s), type {' or '.join(runnable)}, without a temperature"
            )
    if model.final_norms and model.norm == "post":
        return (
            "model.final_norm is true with model.norm post; CTranslate2 has no norm after "
            "post-norm layers: translate with the PyTorch engine instead"
        )
    heads = {name: model.heads(section) for name, section in sections.items()}
    if len(set(heads.values())) > 1:
        counts = " and ".join(f"model.{name} {count}" for name, count in heads.items())
        return f"the heads differ ({counts}); CTranslate2 uses one number of heads for all"
    return None


def _attention(section: AttentionConfig, heads: int) -> Attention:
    return build_attention(section, heads, heads, heads)


def export_ctranslate2(
    run_dir: Path, output: Path, quantization: str = "float32", checkpoint: str = "best"
) -> None:
    """Write the CTranslate2 model of a run's checkpoint to `output` (a new directory)."""
    require_ctranslate2()
    run = RunDir(Path(run_dir))
    problem = unexportable(run.load_config())
    if problem is not None:
        raise UserError(f"{run.root} cannot be exported: {problem}")
    if quantization not in QUANTIZATIONS:
        raise UserError(
            f"--quantization {quantization}: expected one of {', '.join(QUANTIZATIONS)}"
        )
    if Path(output).exists():
        raise UserError(f"{output} exists; pass a new --output directory")
    origin, tokenizer, model = load_trained_model(run, checkpoint)
    cfg = origin.config
    spec = _spec(model, cfg, tokenizer)
    settings = {
        "decode": cfg.decode.model_dump(),
        "max_source": max_source_pieces(cfg),
        "tokenizer": tokenizer.fingerprint,
        "alignment_heads": cfg.model.alignment_heads or cfg.model.heads(cfg.model.attention),
        "tags": cfg.data.tag_names,
        "languages": cfg.data.target_languages,
        "targets": list(cfg.data.source_tags.targets),
    }

    def write(tmp: Path) -> None:
        tmp.mkdir()
        spec.validate()
        spec.optimize(quantization=quantization)
        spec.save(str(tmp))
        shutil.copytree(run.tokenizer, tmp / TOKENIZER, ignore=shutil.ignore_patterns(*DERIVED))
        (tmp / SETTINGS).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        readme = _readme(run, quantization, cfg.data.symbols)
        (tmp / "README.md").write_text(readme, encoding="utf-8")

    publish_directory(Path(output), write, new=True)


CT2_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "silu": "SWISH"}  # CTranslate2's names


def _spec(model: TransformerSeq2Seq, cfg: Config, tokenizer: Tokenizer):
    """The CTranslate2 TransformerSpec of `model`, weights and vocabularies set."""
    from ctranslate2.specs import TransformerSpec, common_spec

    heads, pre_norm = cfg.model.heads(cfg.model.attention), cfg.model.norm == "pre"
    activation = GATED.get(cfg.model.ffn_activation, cfg.model.ffn_activation)
    # Its returned attention (the coverage penalty's) averages the heads of the layer that
    # ours reads, as ours: model.alignment_layer and model.alignment_heads are its own.
    spec = TransformerSpec.from_config(
        (cfg.model.encoder_layers, cfg.model.decoder_layers),
        heads,
        pre_norm=pre_norm,
        no_final_norm=not cfg.model.final_norms,
        alignment_layer=cfg.model.alignment_layer,
        alignment_heads=cfg.model.alignment_heads or heads,
        activation=getattr(common_spec.Activation, CT2_ACTIVATIONS[activation]),
        ffn_glu=cfg.model.ffn_activation in GATED,
        rms_norm=cfg.model.norm_type == "rmsnorm",
    )
    for stack in (spec.encoder, spec.decoder):
        stack.scale_embeddings = cfg.model.scale_embedding
    # Positions for the longest source and the longest output its limit allows.
    source = max_source_pieces(cfg) + 1
    output = math.ceil(cfg.decode.max_len_ratio * source) + cfg.decode.max_len_offset + 1
    positions = max(1024, source, output)
    table = _array(sinusoids(positions, cfg.model.hidden_dim))
    final = cfg.model.final_norms
    _set_stack(spec.encoder, model.src_embed.tokens, model.encoder_norm, table, final)
    _set_stack(spec.decoder, model.tgt_embed.tokens, model.decoder_norm, table, final)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder_layers, strict=True):
        _set_self_attention(layer_spec.self_attention, layer.self_attention)
        _set_norm(layer_spec.self_attention.layer_norm, layer.attention_block.norm)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_block.norm)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder_layers, strict=True):
        _set_self_attention(layer_spec.self_attention, layer.self_attention)
        _set_norm(layer_spec.self_attention.layer_norm, layer.self_attention_block.norm)
        cross, attention = layer_spec.attention, layer.cross_attention
        _set_linear(cross.linear[0], attention.query_proj)
        _set_fused(cross.linear[1], [attention.key_proj, attention.value_proj])
        _set_linear(cross.linear[2], attention.out_proj)
        _set_norm(cross.layer_norm, layer.cross_attention_block.norm)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_block.norm)
    _set_linear(spec.decoder.projection, model.output)
    spec.register_source_vocabulary(tokenizer.src_vocabulary())
    spec.register_target_vocabulary(tokenizer.tgt_vocabulary())
    # The encoder reads pieces + </s>; the decoder starts from <s>; torch's layer norm eps.
    spec.config.add_source_eos = True
    spec.config.decoder_start_token = "<s>"
    spec.config.layer_norm_epsilon = NORM_EPS
    return spec


def _array(tensor: torch.Tensor):
    return tensor.detach().float().contiguous().numpy()


def _set_stack(spec, embedding: torch.nn.Embedding, final_norm, table, final: bool) -> None:
    """Embeddings, positions and final norm (where it has one) of an encoder or decoder
    spec (the encoder's embeddings are a list, one per source feature)."""
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _array(embedding.weight)
    spec.position_encodings.encodings = table
    if final:
        _set_norm(spec.layer_norm, final_norm)


def _set_linear(spec, linear: torch.nn.Linear) -> None:
    spec.weight = _array(linear.weight)
    if linear.bias is not None:
        spec.bias = _array(linear.bias)


def _set_fused(spec, linears: list[torch.nn.Linear]) -> None:
    """One matrix (and bias, where they have them) for several projections of the same
    input, stacked in order."""
    spec.weight = _array(torch.cat([linear.weight for linear in linears]))
    if linears[0].bias is not None:
        spec.bias = _array(torch.cat([linear.bias for linear in linears]))


def _set_self_attention(spec, attention) -> None:
    _set_fused(spec.linear[0], [attention.query_proj, attention.key_proj, attention.value_proj])
    _set_linear(spec.linear[1], attention.out_proj)


def _set_norm(spec, norm: torch.nn.Module) -> None:
    """A LayerNorm's gain and bias, or an RMSNorm's gain."""
    spec.gamma = _array(norm.weight)
    if getattr(norm, "bias", None) is not None:
        spec.beta = _array(norm.bias)


def _set_feed_forward(spec, layers: FeedForward, norm: torch.nn.Module) -> None:
    """The feed-forward layers; a gated one's expanding matrix is CTranslate2's two, the
    activated half (linear_0) and the other (linear_0_noact)."""
    if layers.gated:
        weights, biases = layers.expand.weight.chunk(2), layers.expand.bias.chunk(2)
        for part, half in ((spec.linear_0, 0), (spec.linear_0_noact, 1)):
            part.weight, part.bias = _array(weights[half]), _array(biases[half])
    else:
        _set_linear(spec.linear_0, layers.expand)
    _set_linear(spec.linear_1, layers.contract)
    _set_norm(spec.layer_norm, norm)


def _readme(run: RunDir, quantization: str, tags: list[str]) -> str:
    tagged = (
        f"\nIt was trained with tags ({', '.join(tags)}): a tag, where you give one, is one "
        f"piece before the source's, as in `[\"{tags[0]}\", *pieces]` (a target language's "
        "<2xx> first, where it was trained into several).\n"
        if tags
        else ""
    )
    return f"""# A CTranslate2 model exported by seq2seq

From `{run.root}` ({quantization} weights). With seq2seq:

    seq2seq translate --engine ctranslate2 --run THIS_DIRECTORY < input.txt

With CTranslate2 alone (Python), the SentencePiece models are in `{TOKENIZER}/`:

    import ctranslate2, sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file="{TOKENIZER}/joint.model")
    translator = ctranslate2.Translator("THIS_DIRECTORY")
    pieces = sp.encode(["Ein Hund rennt."], out_type=str)
    result = translator.translate_batch(pieces, beam_size=5)
    print(sp.decode(result[0].hypotheses[0]))

(A run with separate vocabularies, or an imported one, has `src.model` and `tgt.model`
instead of `joint.model`: encode with the first, decode with the second.) `{SETTINGS}`
holds the run's decoding settings.
{tagged}"""
