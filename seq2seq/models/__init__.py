"""Encoder-decoder architectures behind one contract (see base.py)."""

from seq2seq.models.base import Memory, Seq2Seq, Step
from seq2seq.models.build import build_model, count_parameters

__all__ = ["Memory", "Seq2Seq", "Step", "build_model", "count_parameters"]
