"""Build a model from its config by architecture name."""

from __future__ import annotations

from seq2seq.config import ModelConfig
from seq2seq.models.base import Seq2Seq
from seq2seq.models.rnn import RNNSeq2Seq
from seq2seq.models.transformer import TransformerSeq2Seq

ARCHITECTURES: dict[str, type[Seq2Seq]] = {"rnn": RNNSeq2Seq, "transformer": TransformerSeq2Seq}


def build_model(cfg: ModelConfig, src_vocab: int, tgt_vocab: int, pad_id: int) -> Seq2Seq:
    return ARCHITECTURES[cfg.arch](cfg, src_vocab, tgt_vocab, pad_id)


def count_parameters(model: Seq2Seq) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
