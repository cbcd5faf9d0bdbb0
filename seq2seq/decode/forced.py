"""Forced scoring: the model's log-probability of a given translation, teacher-forced.

For a source x and a reference y_1 .. y_n (then EOS = y_{n+1}):

    log P(y | x) = sum_{t=1}^{n+1} log p(y_t | y_<t, x)

reported with its length in tokens n + 1, per token (log P / (n + 1)) and normalised as the
beam search ranks hypotheses (log P / lp(n + 1), the length penalty of `search`), so that
a search's hypothesis scores here what the search said. One teacher-forced pass per batch,
as in training; how corpora are filtered and n-best lists reranked.

Forced alignment: the word alignment of a given pair, read from the attention of the
decoder's steps over the reference as a translation's is read from its search's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor
from tqdm import tqdm

from seq2seq.config import DecodeConfig
from seq2seq.data.padded_batches import Batch, make_batch, token_batches
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decode.line_translator import Translation
from seq2seq.decode.search.beams import length_penalty
from seq2seq.errors import UserError
from seq2seq.models import Seq2Seq


class TeacherForcing(Protocol):
    """What a teacher-forced pass reads of a translator (`translate.Translator` is one):
    its model on its device, its tokenizer and decode section, how it reads a source and
    how many tokens a batch takes."""

    model: Seq2Seq
    device: torch.device
    tokenizer: Tokenizer
    decode: DecodeConfig

    def source_ids(
        self, lines: list[str], options: DecodeConfig
    ) -> tuple[list[list[int]], list[bool]]: ...

    def source_tags(self, options: DecodeConfig) -> tuple[str, ...]: ...

    def batch_tokens(self, options: DecodeConfig) -> int: ...

    def follow_free_cpus(self) -> None: ...


@dataclass(frozen=True)
class ForcedScore:
    """The model's score of one sentence pair."""

    log_prob: float  # log P(reference + EOS | source)
    tokens: int  # reference pieces + EOS
    normalised: float  # log P / lp(tokens): the beam search's score
    # the log-probability of each reference piece and of the EOS; None unless asked for
    token_scores: list[float] | None = None
    pieces: list[int] | None = None  # the reference's piece ids, with `token_scores`

    @property
    def per_token(self) -> float:
        return self.log_prob / self.tokens


@torch.inference_mode()
def forced_token_log_probs(model: Seq2Seq, batch: Batch, lengths: list[int]) -> Tensor:
    """(B, T) log p of each target piece and EOS of each pair of a batch with targets (0
    after them), whose `lengths` count target pieces + EOS (by length, not by PAD: an
    output may hold PAD's id)."""
    log_probs = model.log_probs(batch.src, batch.src_mask, batch.tgt_in)
    picked = log_probs.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1)
    steps = torch.arange(picked.size(1), device=picked.device)
    real = steps < torch.tensor(lengths, device=picked.device).unsqueeze(1)
    return picked.masked_fill(~real, 0.0)


@torch.inference_mode()
def forced_steps(model: Seq2Seq, batch: Batch) -> tuple[Tensor, Tensor]:
    """The decoder's steps over a batch's targets, one `decode_step` a position fed the
    previous piece (BOS first), as a search's steps that found them: their attention
    weights (B, T, [heads,] S) and the log-probability of each target piece and EOS
    (B, T), T the longest target + EOS."""
    memory = model.encode(batch.src, batch.src_mask)
    state, rows, picked = model.init_state(memory), [], []
    for t in range(batch.tgt_in.size(1)):
        step = model.decode_step(memory, state, batch.tgt_in[:, t])
        rows.append(step.attention)
        picked.append(step.log_probs.float().gather(-1, batch.tgt_out[:, t, None]))
        state = step.state
    return torch.stack(rows, 1), torch.cat(picked, -1)


def _pair_ids(
    translator: TeacherForcing, sources: list[str], references: list[str], options: DecodeConfig
) -> tuple[list[list[int]], list[list[int]]]:
    """The piece ids of line-aligned sources (as translation reads them: cut, after
    the tags of `options`) and references."""
    if len(sources) != len(references):
        raise UserError(
            f"{len(sources)} source lines but {len(references)} reference lines; "
            "give one reference per source line"
        )
    src_ids = translator.source_ids(sources, options)[0]
    return src_ids, translator.tokenizer.encode_tgt(references)


def _pair_batches(
    translator: TeacherForcing, ids: tuple[list[list[int]], list[list[int]]], options: DecodeConfig
) -> Iterator[tuple[list[int], Batch]]:
    """(the pairs' numbers, their batch on the translator's device), in batches of about
    `options`' batch tokens (padded tokens per side)."""
    src_ids, tgt_ids = ids
    lengths = [len(s) for s in src_ids], [len(t) for t in tgt_ids]
    for group in token_batches(*lengths, translator.batch_tokens(options)):
        translator.follow_free_cpus()
        batch = make_batch([src_ids[i] for i in group], [tgt_ids[i] for i in group], group)
        yield group, batch.to(translator.device)


def forced_translations(
    translator: TeacherForcing,
    sources: list[str],
    references: list[str],
    options: DecodeConfig,
    progress: bool = False,
) -> list[Translation | None]:
    """Each line-aligned pair as the `Translation` of its source into its reference: the
    reference's tokens, their score (log P / lp, as the search ranks) and the attention
    of the steps over them (`forced_steps`), and the tags of `options`; None where a side
    is blank."""
    ids = _pair_ids(translator, sources, references, options)
    tags = translator.source_tags(options)
    found: list[Translation | None] = [None] * len(sources)
    with tqdm(total=len(sources), unit="pair", disable=None if progress else True) as bar:
        for group, batch in _pair_batches(translator, ids, options):
            weights, picked = (x.float().cpu() for x in forced_steps(translator.model, batch))
            for row, i in enumerate(group):
                tokens = ids[1][i]
                if sources[i].strip() and tokens:
                    n = len(tokens) + 1
                    score = picked[row, :n].sum() / length_penalty(float(n), options.length_penalty)
                    attention = weights[row, :n, ..., : len(ids[0][i]) + 1]
                    found[i] = Translation(
                        references[i], float(score), tokens, attention, tags=tags
                    )
            bar.update(len(group))
    return found


def score_pairs(
    translator: TeacherForcing,
    sources: list[str],
    references: list[str],
    options: DecodeConfig,
    progress: bool = False,
    token_scores: bool = False,
) -> list[ForcedScore]:
    """The `ForcedScore` of each line-aligned pair (a blank side is scored as the empty
    sentence it is), with the length penalty of `options`, in batches of about its batch
    tokens (padded tokens per side), with its pieces' log-probabilities if `token_scores`;
    sources are read as translation reads them (cut, after the tags of `options`)."""
    src_ids, tgt_ids = _pair_ids(translator, sources, references, options)
    totals: list[float] = [0.0] * len(sources)
    steps: list[list[float] | None] = [None] * len(sources)
    with tqdm(total=len(sources), unit="pair", disable=None if progress else True) as bar:
        for group, batch in _pair_batches(translator, (src_ids, tgt_ids), options):
            lengths = [len(tgt_ids[i]) + 1 for i in group]
            picked = forced_token_log_probs(translator.model, batch, lengths)
            for i, total in zip(group, picked.sum(-1).tolist(), strict=True):
                totals[i] = total
            if token_scores:  # read back only where asked for
                for i, row, n in zip(group, picked.tolist(), lengths, strict=True):
                    steps[i] = row[:n]
            bar.update(len(group))
    return [
        ForcedScore(
            total,
            len(ids) + 1,
            total / float(length_penalty(len(ids) + 1.0, options.length_penalty)),
            row,
            ids if token_scores else None,
        )
        for total, row, ids in zip(totals, steps, tgt_ids, strict=True)
    ]
