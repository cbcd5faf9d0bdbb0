"""A vocabulary shortlist (`decode.shortlist`; Marian's `--shortlist`, Sockeye's
`--restrict-lexicon`): each batch's output layer computes only the target pieces that its
sources' pieces make likely, which makes the output projection, the softmax and the
search's work over the vocabulary cheaper.

The table holds, for each source piece s, its `TRANSLATIONS` best target pieces by IBM
model 1's translation probability p(t | s) (Brown et al., 1993), estimated on the run's
training pairs by `ITERATIONS` rounds of expectation-maximisation from uniform, a NULL
source piece explaining what no source piece does:

    E:  c(s, t) = sum over pairs, over each t of the target, of p(t | s) / sum_s' p(t | s')
        (s and s' over the pair's source pieces and NULL)
    M:  p(t | s) = c(s, t) / sum_t' c(s, t')

and the target pieces in order of frequency. Built once, from the first `MAX_PAIRS`
training pairs, into the run directory (`FILE`), with the tokenizer's fingerprint.

A batch's shortlist is the `FREQUENT` most frequent pieces, the translations of every
piece of its sources, the special pieces and those of its prefixes and phrases (the search
must be able to take them), and the next most frequent up to a multiple of `WIDTH_STEP`.
The batch is searched in the shortlist's own numbering (`Narrowing`): the output layers
compute its V' pieces alone, so the softmax, and every step of the search over the
vocabulary, is V' wide instead of V. Sorted, the shortlist keeps the special pieces (PAD,
UNK, BOS, EOS: ids 0 to 3) at their own numbers, so the search's EOS and BOS are the same;
the decoder reads each token as the piece it numbers, and the hypotheses are numbered
back at the end.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from seq2seq.config import Config
from seq2seq.data.sources import training_inputs
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from seq2seq.data.training_data import training_chunks
from seq2seq.decode.cpu_weights import PackedLinear
from seq2seq.decode.search.hypotheses import Hypothesis
from seq2seq.decode.search_request import SearchRequest
from seq2seq.errors import UserError
from seq2seq.files import atomic_write
from seq2seq.models.base import DecoderState, Memory, Step

FILE = "shortlist.pt"
TRANSLATIONS = 20  # target pieces kept per source piece
FREQUENT = 100  # the most frequent target pieces, always in
ITERATIONS = 5
MAX_PAIRS = 100_000  # Multi30k's 29,000 take 4 s; time and memory grow with every pair's pieces
WIDTH_STEP = 128  # a batch's shortlist is a multiple of it (`_rounded`)
SETTINGS = [2, TRANSLATIONS, ITERATIONS, MAX_PAIRS]  # (format 2) a table of others is built anew
_NONE = -1  # in `Shortlist.translations`: no piece
# PAD, UNK, BOS and EOS (ids 0 to 3): in every shortlist, at their own numbers
SPECIAL_PIECES = max(PAD_ID, UNK_ID, BOS_ID, EOS_ID) + 1


@dataclass(frozen=True)
class Shortlist:
    translations: Tensor  # (source vocabulary, TRANSLATIONS) target pieces, _NONE: none
    by_frequency: Tensor  # (target vocabulary,) its pieces, the most frequent first

    def pieces(self, src: Tensor, forced: Sequence[Sequence[int]] = ()) -> Tensor:
        """The sorted target pieces a batch of sources (B, S) may produce: with the special
        pieces and the `forced` ones (its prefixes' and phrases')."""
        found = self.translations[src.flatten()].flatten()
        extra = [*range(SPECIAL_PIECES), *(piece for pieces in forced for piece in pieces)]
        extra_ids = torch.tensor(extra, dtype=torch.long, device=src.device)
        kept = torch.cat([found[found != _NONE], self.by_frequency[:FREQUENT], extra_ids])
        return _rounded(kept.unique(), self.by_frequency)

    def to(self, device: torch.device) -> Shortlist:
        """The table on `device`, where a batch's sources are (moved once, not per batch)."""
        return Shortlist(self.translations.to(device), self.by_frequency.to(device))

    @classmethod
    def of_run(cls, run: Path, config: Config, tokenizer: Tokenizer) -> Shortlist:
        """The run's table, built and kept in the run directory the first time it is asked;
        one line for a run into several languages (its sources' target tags would need a
        table of their own)."""
        targets = config.data.source_tags.targets
        if targets:
            raise UserError(
                f"decode.shortlist: {run} translates into {', '.join(targets)}, and the "
                "shortlist's table is of one target language; translate without it"
            )
        path = Path(run) / FILE
        state = _kept_state(path)
        made = state and (state.get("tokenizer"), state.get("settings"))
        if made == (tokenizer.fingerprint, SETTINGS):
            return cls(state["translations"], state["by_frequency"])
        print(f"building the vocabulary shortlist of {run} (once)", file=sys.stderr)
        built = build_shortlist(training_pairs(config, tokenizer), tokenizer)
        state = {
            "tokenizer": tokenizer.fingerprint,
            "settings": SETTINGS,
            "translations": built.translations,
            "by_frequency": built.by_frequency,
        }
        atomic_write(path, lambda handle: torch.save(state, handle))
        return built


def _kept_state(path: Path) -> dict | None:
    """What the run keeps in `path`; None where there is none, or none readable (a
    damaged file is built again, as one of other settings is)."""
    try:
        state = torch.load(path, weights_only=True)
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError):
        return None
    return state if isinstance(state, dict) else None


def training_pairs(config: Config, tokenizer: Tokenizer) -> Iterator[tuple[list, list]]:
    """The piece ids of the run's first `MAX_PAIRS` training pairs."""
    left, corpora = MAX_PAIRS, training_inputs(config.data)
    for source, langs, _ in corpora:
        try:
            source.files(langs)
        except UserError as error:
            raise UserError(
                f"decode.shortlist is built from the training pairs ({error}); translate from "
                "the directory the run was trained in"
            ) from None
    for chunk in training_chunks(corpora):
        chunk_src, chunk_tgt = chunk.src[:left], chunk.tgt[:left]
        src, tgt = tokenizer.encode_src(chunk_src), tokenizer.encode_tgt(chunk_tgt)
        yield from zip(src, tgt, strict=True)
        left -= len(chunk_src)
        if not left:
            return


def build_shortlist(pairs: Iterator[tuple[list, list]], tokenizer: Tokenizer) -> Shortlist:
    """The table of the module from `pairs` of source and target piece ids."""
    sources, targets = tokenizer.src_vocab_size, tokenizer.tgt_vocab_size
    keys, groups, counts = [], [], np.zeros(targets, np.int64)
    first_group = 0
    for src, tgt in pairs:
        src_ids = np.array([*src, sources], np.int64)  # sources: NULL's id
        tgt_ids = np.array(tgt, np.int64)
        keys.append((src_ids[:, None] * targets + tgt_ids[None, :]).ravel())
        groups.append(np.tile(np.arange(first_group, first_group + len(tgt_ids)), len(src_ids)))
        first_group += len(tgt_ids)
        np.add.at(counts, tgt_ids, 1)
    if not keys:
        raise UserError("decode.shortlist: the run has no training pairs to build it from")
    pair_keys, probability = _ibm1(
        torch.from_numpy(np.concatenate(keys)), torch.from_numpy(np.concatenate(groups)), targets
    )
    translations = _best_translations(pair_keys, probability, sources, targets)
    by_frequency = torch.from_numpy(counts).argsort(descending=True, stable=True)
    return Shortlist(translations, by_frequency)


def _rounded(pieces: Tensor, by_frequency: Tensor) -> Tensor:
    """The sorted `pieces` with the next most frequent ones added up to a multiple of
    `WIDTH_STEP` (at most all): an output layer of a width seen before reuses the kernels
    oneDNN compiled for it, where one of a new width per batch compiles its own."""
    wanted = min(len(by_frequency), -(-len(pieces) // WIDTH_STEP) * WIDTH_STEP)
    present = torch.zeros(len(by_frequency), dtype=torch.bool, device=pieces.device)
    present[pieces] = True
    added = by_frequency[~present[by_frequency]][: wanted - len(pieces)]
    return torch.cat([pieces, added]).sort().values


def _ibm1(keys: Tensor, groups: Tensor, targets: int) -> tuple[Tensor, Tensor]:
    """IBM model 1's p(t | s) (the module's EM) of each (s, t) that co-occurs, keyed
    s * `targets` + t: the keys and their probabilities. `keys` has one entry per source
    piece (NULL included) and target piece of each pair; `groups`, the target piece's
    number among all pairs' target pieces."""
    pair_keys, pair_of = keys.unique(return_inverse=True)
    source_of = pair_keys // targets
    probability = torch.ones(len(pair_keys), dtype=torch.float64)  # uniform: any constant
    for _ in range(ITERATIONS):
        weight = probability[pair_of]
        explained = torch.zeros(int(groups.max()) + 1, dtype=weight.dtype)
        explained.index_add_(0, groups, weight)
        counts = torch.zeros_like(probability).index_add_(0, pair_of, weight / explained[groups])
        per_source = torch.zeros(int(source_of.max()) + 1, dtype=counts.dtype)
        per_source.index_add_(0, source_of, counts)
        probability = counts / per_source[source_of]
    return pair_keys, probability


def _best_translations(keys: Tensor, probability: Tensor, sources: int, targets: int) -> Tensor:
    """(sources, TRANSLATIONS) each source piece's most probable target pieces, best first,
    _NONE where it has fewer; NULL's are left out."""
    source, target = keys // targets, keys % targets
    order = torch.argsort(source.double() * 2 + (1 - probability))  # by source, best first
    source, target = source[order], target[order]
    first = torch.searchsorted(source, source)  # where each one's source starts
    rank = torch.arange(len(source)) - first
    kept = (rank < TRANSLATIONS) & (source < sources)
    table = torch.full((sources, TRANSLATIONS), _NONE, dtype=torch.long)
    table[source[kept], rank[kept]] = target[kept]
    return table


@dataclass(frozen=True)
class Narrowing:
    """A batch searched in its shortlist's numbering (see the module): what the search
    reads, numbered into it, and what it finds, numbered back."""

    pieces: Tensor  # (V',) the shortlist, sorted: its number n is piece pieces[n]

    def numbers(self, ids: list[int]) -> list[int]:
        """The shortlist's numbers of pieces it holds."""
        wanted = torch.tensor(ids, dtype=torch.long, device=self.pieces.device)
        return torch.searchsorted(self.pieces, wanted).tolist()

    def request(self, request: SearchRequest) -> SearchRequest:
        """The request with its prefixes' and phrases' pieces numbered into the shortlist."""
        prefixes = request.prefixes and [
            None if p is None else replace(p, ids=self.numbers(p.ids)) for p in request.prefixes
        ]
        constraints = request.constraints and [
            [self.numbers(phrase) for phrase in phrases] for phrases in request.constraints
        ]
        return replace(request, prefixes=prefixes, constraints=constraints)

    def found(self, hypotheses: list[list[Hypothesis]]) -> list[list[Hypothesis]]:
        """The hypotheses with their tokens numbered back into the vocabulary."""
        pieces = self.pieces.tolist()
        for sentence in hypotheses:
            for hypothesis in sentence:
                hypothesis.tokens = [pieces[n] for n in hypothesis.tokens]
        return hypotheses

    @contextmanager
    def model(self, model: nn.Module) -> Iterator[NarrowedModel]:
        """`model` as the search reads it in the shortlist's numbering, for the block: its
        output layers compute the shortlist alone."""
        swapped = _output_layers(model)
        for parent, layer in swapped:
            parent.output = narrow_layer(layer, self.pieces)
        try:
            yield NarrowedModel(model, self.pieces)
        finally:
            for parent, layer in swapped:
                parent.output = layer


@dataclass(frozen=True)
class NarrowedModel:
    """The model step (`Seq2Seq`'s encode, init_state, decode_step) whose tokens are
    shortlist numbers: each is read as the piece it numbers."""

    model: nn.Module
    pieces: Tensor

    def encode(self, src: Tensor, src_mask: Tensor) -> Memory:
        return self.model.encode(src, src_mask)

    def init_state(self, memory: Memory) -> DecoderState:
        return self.model.init_state(memory)

    def decode_step(
        self, memory: Memory, state: DecoderState, prev_tokens: Tensor, need_weights: bool = True
    ) -> Step:
        return self.model.decode_step(memory, state, self.pieces[prev_tokens], need_weights)


def _output_layers(model: nn.Module) -> list[tuple[nn.Module, nn.Module]]:
    """(parent, layer) of each child named `output`: the model step's output projection
    (every member's, in an ensemble; docs/architecture.md)."""
    found = [
        (parent, layer)
        for parent in model.modules()
        if (layer := dict(parent.named_children()).get("output")) is not None
    ]
    if not found:
        raise TypeError("the model has no output layer named `output` to shortlist")
    return found


def narrow_layer(full: nn.Module, pieces: Tensor) -> nn.Linear:
    """An output projection restricted to some pieces, x W[pieces]^T (+ b[pieces]), packed
    for oneDNN where the full one was (`PackedLinear`). An int8 layer's weight is read back
    as float32: the shortlist's product is the small one."""
    weight = full.weight() if callable(full.weight) else full.weight  # int8's is a method
    weight = weight.dequantize() if weight.is_quantized else weight
    bias = full.bias() if callable(full.bias) else full.bias
    layer = nn.Linear(weight.size(1), len(pieces), bias=bias is not None, device="meta")
    layer.weight = nn.Parameter(weight.index_select(0, pieces), requires_grad=False)
    if bias is not None:
        layer.bias = nn.Parameter(bias.index_select(0, pieces), requires_grad=False)
    return PackedLinear.of(layer) if isinstance(full, PackedLinear) else layer
