"""A trained run directory + text in -> text out, strictly line-aligned."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from seq2seq.attention import padding_mask
from seq2seq.checkpoint import RunDir, load_checkpoint
from seq2seq.config import Config, DecodeConfig, config_from_dict
from seq2seq.data.batching import make_batch, token_batches
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from seq2seq.decode.search import Hypotheses, greedy, output_limits
from seq2seq.errors import UserError
from seq2seq.models import Seq2Seq, build_model


def pick_device(name: str = "auto") -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("train.device is cuda but no CUDA device is available; use auto or cpu")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def load_run_config(run: RunDir) -> Config:
    if not run.config.is_file():
        raise UserError(f"{run.root} is not a run directory (no config.yaml); train one first")
    return config_from_dict(yaml.safe_load(run.config.read_text(encoding="utf-8")))


@dataclass
class AttentionMap:
    src_pieces: list[str]  # source pieces and </s>
    tgt_pieces: list[str]  # output pieces and </s>
    weights: torch.Tensor  # (target, source) or (target, heads, source)
    translation: str


class Translator:
    """Translates lists of lines with a model; empty or blank lines give empty lines."""

    def __init__(
        self,
        model: Seq2Seq,
        tokenizer: Tokenizer,
        decode: DecodeConfig,
        device: torch.device,
    ) -> None:
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.decode = decode
        self.device = device

    @classmethod
    def from_run(cls, run_dir: Path, checkpoint: str = "best") -> Translator:
        run = RunDir(Path(run_dir))
        cfg = load_run_config(run)
        path = run.resolve_checkpoint(checkpoint)
        tokenizer = Tokenizer.load(run.tokenizer)
        model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, PAD_ID)
        state = load_checkpoint(path)
        model.load_state_dict(state["model"])
        return cls(model, tokenizer, cfg.decode, pick_device(cfg.train.device))

    def translate(self, lines: list[str], batch_tokens: int | None = None) -> list[str]:
        outputs = [""] * len(lines)
        keep = [i for i, line in enumerate(lines) if line.strip()]
        if not keep:
            return outputs
        src_ids = self.tokenizer.encode_src([lines[i] for i in keep])
        budget = batch_tokens or self.decode.batch_tokens
        was_training = self.model.training
        self.model.eval()
        for group in token_batches([len(s) for s in src_ids], None, budget):
            hyps = self.search([src_ids[i] for i in group]).tokens
            for position, text in zip(group, self.tokenizer.decode_tgt(hyps), strict=True):
                outputs[keep[position]] = text
        self.model.train(was_training)
        return outputs

    def attention_map(self, line: str) -> AttentionMap:
        """Translate one line and return its attention with the pieces that label it."""
        if not line.strip():
            raise UserError("nothing to translate: the source sentence is empty")
        hyps = self.search(self.tokenizer.encode_src([line]))
        tokens = hyps.tokens[0]
        return AttentionMap(
            src_pieces=[*self.tokenizer.src_pieces(line), "</s>"],
            tgt_pieces=self.tokenizer.tgt_pieces_from_ids([*tokens, EOS_ID]),
            weights=hyps.attention[0],
            translation=self.tokenizer.decode_tgt([tokens])[0],
        )

    def search(self, src_ids: list[list[int]]) -> Hypotheses:
        batch = make_batch(src_ids, None, list(range(len(src_ids)))).to(self.device)
        return greedy(
            self.model,
            batch.src,
            padding_mask(batch.src_lengths, batch.src.size(1)),
            output_limits(batch.src_lengths, self.decode.max_len_ratio, self.decode.max_len_offset),
            BOS_ID,
            EOS_ID,
        )
