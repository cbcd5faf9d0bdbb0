"""Attention diagnostics: what every attention module of a model does with its weights.

`measure_attention(model, batches)` runs the teacher-forced pass over `batches` with a
recorder on each attention module (a *site*) and returns, per site, each diagnostic of
`DIAGNOSTICS` per head and averaged over heads, plus the type's learned scales. Only real
queries (not padding) count, and only real keys enter each query's statistics.

A recorder recomputes the energies and weights beside the module's own computation
(`Attention.energies_and_weights`), so measuring changes no result, consumes no random
numbers and works whether or not the module forms its weights (fused paths). Hard
attention's weights w are there its position distribution p, not the positions chosen.

Per query q with weights w over its n real keys and energies e (before the softmax):

    entropy        H = -sum_k w_k ln w_k                      (nats)
    entropy_norm   H / ln n                                   (queries with n >= 2)
    max_weight     max_k w_k
    saturated      [max_k w_k > 0.9]
    energy_std     sqrt(mean_k (e_k - mean e)^2)
    energy_max_abs max_k |e_k|                                (the largest over all queries)
    query_norm     ||q||, q as `score` compares it (`Attention.scored_inputs`)
    key_norm       ||k|| over real keys, as `score` compares them
    sink_mass      w at the last real key: the source's EOS   (sites whose keys are the source)
    support        #{k : w_k > 0}                             (sparse normalizers)
    zeros          #{k : w_k = 0} / n                         (sparse normalizers)
    reinforce_var  Var(A) over the real target tokens, A = r - b REINFORCE's learning
                   signal of one draw each (`Seq2Seq.learning_signal`, from a generator of
                   its own)                   (sites over the source of a REINFORCE model)

Each is averaged over real queries (key_norm: over real keys; reinforce_var: its variance
over them) per head; the site's value is the mean over heads (energy_max_abs: the
maximum); a learned scale with a value per head (entmax's alpha) reports its mean, and
each head's. A value with nothing to average (no query with two keys, say) is NaN, and a
NaN or infinity is kept as such.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor, nn

from seq2seq.attention.base import Attention
from seq2seq.attention.multihead import MultiHead
from seq2seq.data.padded_batches import Batch
from seq2seq.data.tokenizer import PAD_ID

Side = Literal["source", "target"]
SATURATED = 0.9  # a query whose largest weight exceeds this is saturated
# A site over the source whose sink mass reaches this is locked onto the source's EOS: half
# of the attention on one of the ~14 source pieces of a Multi30k sentence, a piece that
# carries no word.
LOCKED = 0.5


@dataclass(frozen=True)
class Observation:
    """One attend call with its heads split out of the batch."""

    energies: Tensor  # (B, H, Tq, Tk) score(q, k), unmasked
    weights: Tensor  # (B, H, Tq, Tk)
    keys_mask: Tensor  # (B, 1, Tq, Tk) True at each query's real keys
    queries: Tensor  # (B, 1, Tq) True at real queries
    query: Tensor | None  # (B, H, Tq, d) as scored; None: the energies do not read it
    keys: Tensor | None  # (B, H, Tk, d) as scored
    sink: bool  # whether the last real key is the source's EOS
    sparse: bool  # whether the normalizer gives exact zeros (all but softmax)
    signal: Tensor | None  # (B, 1, Tq) REINFORCE's learning signal at the queries, or None

    @property
    def real_keys(self) -> Tensor:
        """(B, 1, Tq) number of real keys of each query."""
        return self.keys_mask.sum(-1)


# What a diagnostic measures of an observation: values (B, H, N) and which of them count
# (B, 1 or H, N); None where the type does not have it.
Measure = Callable[[Observation], tuple[Tensor, Tensor] | None]


@dataclass(frozen=True)
class Diagnostic:
    heading: str  # its column in `seq2seq inspect`'s table
    measure: Measure
    # Over the counted queries: their mean, largest value, or variance.
    reduce: Literal["mean", "max", "variance"] = "mean"


def _entropy(o: Observation) -> Tensor:
    return -torch.special.xlogy(o.weights, o.weights).masked_fill(~o.keys_mask, 0).sum(-1)


def _largest(o: Observation) -> Tensor:
    return o.weights.masked_fill(~o.keys_mask, 0).amax(-1)


def _energy_std(o: Observation) -> Tensor:
    energies = o.energies.masked_fill(~o.keys_mask, 0)
    count = o.real_keys.clamp(min=1)
    mean = energies.sum(-1, keepdim=True) / count.unsqueeze(-1)
    return (((energies - mean) ** 2).masked_fill(~o.keys_mask, 0).sum(-1) / count).sqrt()


def _key_norms(o: Observation) -> tuple[Tensor, Tensor] | None:
    if o.keys is None:
        return None
    real = (o.keys_mask & o.queries.unsqueeze(-1)).any(-2)  # keys a real query sees
    return o.keys.norm(dim=-1), real


def _sink(o: Observation) -> tuple[Tensor, Tensor] | None:
    if not o.sink:
        return None
    last = (o.real_keys - 1).clamp(min=0).expand(*o.weights.shape[:3]).unsqueeze(-1)
    return o.weights.gather(-1, last).squeeze(-1), o.queries


def _support(o: Observation) -> tuple[Tensor, Tensor] | None:
    if not o.sparse:
        return None
    return ((o.weights > 0) & o.keys_mask).sum(-1).float(), o.queries


def _zeros(o: Observation) -> tuple[Tensor, Tensor] | None:
    if not o.sparse:
        return None
    zeros = ((o.weights == 0) & o.keys_mask).sum(-1)
    return zeros / o.real_keys.clamp(min=1), o.queries


# The one table of diagnostics: a new one is one entry here (and a line in docs/attention.md).
DIAGNOSTICS: dict[str, Diagnostic] = {
    "entropy": Diagnostic("H nats", lambda o: (_entropy(o), o.queries)),
    "entropy_norm": Diagnostic(
        "H/ln n",
        lambda o: (_entropy(o) / o.real_keys.clamp(min=2).log(), o.queries & (o.real_keys > 1)),
    ),
    "max_weight": Diagnostic("max w", lambda o: (_largest(o), o.queries)),
    "saturated": Diagnostic("w>0.9", lambda o: ((_largest(o) > SATURATED).float(), o.queries)),
    "energy_std": Diagnostic("e std", lambda o: (_energy_std(o), o.queries)),
    "energy_max_abs": Diagnostic(
        "max|e|",
        lambda o: (o.energies.abs().masked_fill(~o.keys_mask, 0).amax(-1), o.queries),
        "max",
    ),
    "query_norm": Diagnostic(
        "|q|", lambda o: None if o.query is None else (o.query.norm(dim=-1), o.queries)
    ),
    "key_norm": Diagnostic("|k|", _key_norms),
    "sink_mass": Diagnostic("sink", _sink),
    "support": Diagnostic("supp", _support),
    "zeros": Diagnostic("w=0", _zeros),
    "reinforce_var": Diagnostic(
        "A var",
        lambda o: None if o.signal is None else (o.signal.expand(*o.weights.shape[:3]), o.queries),
        "variance",
    ),
}


@dataclass(frozen=True)
class Site:
    """An attention module of a model, as diagnostics see it."""

    name: str  # its path in the model: decoder.attention, decoder_layers.0.cross_attention
    module: Attention  # the module whose `attend` forms the weights (multi-head: its inner)
    heads: int
    queries: Side
    keys: Side


def attention_sites(model: nn.Module) -> list[Site]:
    """Every outermost attention module of `model`. By the models' naming, modules under
    an `encoder*` attribute attend from the source; a decoder's `*self_attention` attends
    over the target, every other decoder attention over the source."""
    sites: list[Site] = []
    for name, module in model.named_modules():
        inside = any(name.startswith(site.name + ".") for site in sites)
        if not isinstance(module, Attention) or inside:
            continue
        queries: Side = "source" if name.split(".")[0].startswith("encoder") else "target"
        keys: Side = (
            "target" if queries == "target" and name.endswith("self_attention") else "source"
        )
        if isinstance(module, MultiHead):
            sites.append(Site(name, module.inner, module.heads, queries, keys))
        else:
            sites.append(Site(name, module, 1, queries, keys))
    return sites


@dataclass
class SiteRecorder:
    """Accumulates a site's diagnostics over the attend calls of a pass, on the device."""

    site: Site
    real: dict[Side, Tensor] = field(default_factory=dict)  # (B, T) real positions per side
    # (B, T) REINFORCE's learning signal at the target positions, for a site over the source
    signal: Tensor | None = None
    step: int = 0  # the next target step, for decoders that attend a step at a time
    # name -> [value, count], and the sum of squares for a variance
    sums: dict[str, list[Tensor]] = field(default_factory=dict)

    def start_batch(self, real: dict[Side, Tensor], signal: Tensor | None) -> None:
        self.real, self.step = real, 0
        over_source = (self.site.queries, self.site.keys) == ("target", "source")
        self.signal = signal if over_source else None

    def query_positions(self, steps: int) -> slice:
        """The positions of its queries' side that a call with `steps` queries holds: all of
        them, or the next step of a decoder that attends one step at a time."""
        if steps == self.real[self.site.queries].size(1):
            return slice(None)
        if steps != 1:
            raise ValueError(f"{self.site.name}: {steps} queries fit no side of the batch")
        self.step += 1
        return slice(self.step - 1, self.step)

    def observe(
        self,
        attention: Attention,
        query: Tensor,
        prepared_keys: Tensor,
        mask: Tensor,
        positions: Tensor | None,
    ) -> None:
        heads = self.site.heads

        def split(x: Tensor) -> Tensor:
            return x.reshape(x.size(0) // heads, heads, *x.shape[1:])

        at = self.query_positions(query.size(1))
        signal = None if self.signal is None else self.signal[:, at].unsqueeze(1)
        with torch.no_grad():
            energies, weights = attention.energies_and_weights(
                query, prepared_keys, mask, positions
            )
            scored_query, scored_keys = attention.scored_inputs(query, prepared_keys)
            observation = Observation(
                energies=split(energies.float()),
                weights=split(weights.float()),
                keys_mask=split(mask)[:, :1].expand(-1, 1, query.size(1), -1),
                queries=self.real[self.site.queries][:, at].unsqueeze(1),
                query=None if scored_query is None else split(scored_query.float()),
                keys=None if scored_keys is None else split(scored_keys.float()),
                sink=self.site.keys == "source",
                sparse=attention.normalizer.sparse,
                signal=signal,
            )
            for name, diagnostic in DIAGNOSTICS.items():
                measured = diagnostic.measure(observation)
                if measured is not None:
                    self.add(name, diagnostic, *measured)

    def add(self, name: str, diagnostic: Diagnostic, values: Tensor, counted: Tensor) -> None:
        """Fold (B, H, N) values, where counted, into per-head totals (H,): [largest or sum,
        count], and the sum of squares for a variance."""
        counted = counted.expand_as(values)
        kept = values.masked_fill(~counted, 0)
        if diagnostic.reduce == "max":
            sums = [values.masked_fill(~counted, -math.inf).amax((0, 2))]
        else:
            sums = [kept.sum((0, 2))]
        sums.append(counted.sum((0, 2)))
        if diagnostic.reduce == "variance":
            sums.append((kept**2).sum((0, 2)))
        if name in self.sums:
            before = self.sums[name]
            first = torch.maximum if diagnostic.reduce == "max" else torch.add
            sums = [first(before[0], sums[0]), *map(torch.add, before[1:], sums[1:])]
        self.sums[name] = sums

    def report(self) -> dict:
        """{"heads": H, "queries", "keys", "mean": {name: value}, "per_head": {name: [...]}}:
        per_head only for more than one head; learned scales join the means."""
        per_head: dict[str, list[float]] = {}
        mean: dict[str, float] = {}
        for name, (total, count, *squares) in self.sums.items():
            if DIAGNOSTICS[name].reduce == "max":
                values = torch.where(count > 0, total, math.nan)
                mean[name] = _number(values.max())
            else:
                values = total / count  # 0 / 0 is NaN: nothing was counted
                if squares:  # the variance: E[x^2] - E[x]^2
                    values = squares[0] / count - values**2
                mean[name] = _number(values.mean())
            per_head[name] = [_number(v) for v in values]
        module = self.site.module
        for name, value in (module.learned_scales() | module.normalizer.learned_scales()).items():
            mean[name] = _number(value.mean())
            if value.numel() > 1:
                per_head[name] = [_number(v) for v in value]
        site = self.site
        entry = {"heads": site.heads, "queries": site.queries, "keys": site.keys, "mean": mean}
        return entry | ({"per_head": per_head} if site.heads > 1 else {})


def _number(value: Tensor) -> float:
    """A float of 6 significant digits (NaN and infinities kept)."""
    return float(f"{float(value.detach()):.6g}")


@contextmanager
def listening(recorders: list[SiteRecorder]) -> Iterator[None]:
    """Each recorder on its site's module for the duration of the block."""
    for recorder in recorders:
        recorder.site.module.recorder = recorder
    try:
        yield
    finally:
        for recorder in recorders:
            del recorder.site.module.recorder  # back to the class's None


# Seeds the generator that REINFORCE's learning signal draws from while it is measured.
SIGNAL_SEED = 0


def _learning_signals(model: nn.Module) -> Callable[[Batch], Tensor | None]:
    """A batch -> REINFORCE's learning signal of the model (`Seq2Seq.learning_signal`),
    drawn from a generator of its own seeded with SIGNAL_SEED, or None where it has none
    (a model not trained by REINFORCE, a bare module under test)."""
    learning_signal = getattr(model, "learning_signal", None)
    if learning_signal is None:
        return lambda batch: None
    generator = torch.Generator(next(model.parameters()).device).manual_seed(SIGNAL_SEED)
    return lambda batch: learning_signal(
        batch.src, batch.src_mask, batch.tgt_in, batch.tgt_out, generator
    )


def measure_attention(model: nn.Module, batches: Iterable[Batch]) -> dict[str, dict]:
    """The diagnostics of every attention site of `model` over the teacher-forced pass of
    `batches` (on the model's device), by site name; the model is left as it was."""
    was_training = model.training
    model.eval()
    recorders = [SiteRecorder(site) for site in attention_sites(model)]
    signal_of = _learning_signals(model)
    try:
        with torch.no_grad():
            for batch in batches:
                signal = signal_of(batch)  # before the recorders listen: another pass
                real: dict[Side, Tensor] = {
                    "source": batch.src_mask[:, 0],
                    "target": batch.tgt_in != PAD_ID,
                }
                with listening(recorders):
                    for recorder in recorders:
                        recorder.start_batch(real, signal)
                    model(batch.src, batch.src_mask, batch.tgt_in)
    finally:
        model.train(was_training)
    return {recorder.site.name: recorder.report() for recorder in recorders}


def locked_sites(sites: dict[str, dict]) -> dict[str, float]:
    """Site -> its sink mass, for the sites of `measure_attention`'s result locked onto
    the source's EOS (sink mass at least LOCKED)."""
    return {
        name: entry["mean"]["sink_mass"]
        for name, entry in sites.items()
        if entry["mean"].get("sink_mass", 0.0) >= LOCKED
    }
