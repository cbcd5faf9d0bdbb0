"""Hard attention: the context is the value at one chosen source position (or the mean of
the k most probable), and what training adds to the loss to learn the choice.

The attention's weights p over the keys (the softmax, masked and shaped as for soft
attention, renormalised to sum 1) are the distribution of a position j. `PositionChoice`
turns p into the weights w that take the context, context = sum_k w_k v_k:

    training, reinforce    w = onehot(j),  j = argmax_k (log p_k + g_k)      (j ~ p, Gumbel-max)
    training, gumbel       w = onehot(argmax y) + y - sg(y),  y = softmax((log p + g) / tau)
                           (straight-through: one position forward, y's gradient backward)
    evaluation, argmax     w = onehot(argmax p)
    evaluation, k          w_k = p_k / sum of the k largest p, at the k largest; else 0
    exact (either)         w = p: the caller sums over the positions (the RNN: models/marginal.py)

g_k = -log(-log u_k), u_k uniform from torch's generator (another while diagnostics draw),
so a resumed run draws what the uninterrupted one drew; sg() stops the gradient.
Evaluation never draws.

`ChoiceLoss` is what the recorded choices add to the training loss (REINFORCE: Williams,
1992; the entropy bonus: Williams and Peng, 1991), per target position t:

    reward    r_t = log p(y_t | the choices)                    (detached)
              r_t = sum_{t' >= t} log p(y_t' | the choices)     where a choice at t also
                                                                reaches later tokens
    baseline  b_t = r_t of the same pass with soft attention    (baseline soft)
              b_t = m n_t, m a moving average of the per-token reward, n_t the tokens r_t
                    sums                                          (baseline moving-average)
    signal    A_t = r_t - b_t
    loss      -sum_t [A_t (log p(j_t) - sg(log p(j_t))) + beta (H(p_t) - sg(H(p_t)))]

summed over the model's choices at t (every head of every layer). Its value is 0, so the
logged loss stays the cross-entropy; its gradient is minus REINFORCE's estimate of the
gradient of the expected log-likelihood, E_j[A (d/dtheta) log p(j)], and minus beta times
the entropy's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import torch
from torch import Tensor, nn

from seq2seq.config import AttentionConfig, HardAttentionConfig
from seq2seq.data.tokenizer import PAD_ID


def safe_log(p: Tensor) -> Tensor:
    """log p, -inf where p is 0, with a gradient of 0 there rather than NaN (0 / 0)."""
    tiny = torch.finfo(p.dtype).tiny
    return p.clamp_min(tiny).log().masked_fill(p == 0, float("-inf"))


def entropy(p: Tensor) -> Tensor:
    """-sum_k p_k ln p_k over the last dimension; 0 ln 0 = 0, and a finite gradient there."""
    return -(p * p.clamp_min(torch.finfo(p.dtype).tiny).log()).sum(-1)


def one_hot(index: Tensor, like: Tensor) -> Tensor:
    """1 at `index` (...,) along the last dimension of a tensor shaped as `like`."""
    return torch.zeros_like(like).scatter_(-1, index.unsqueeze(-1), 1.0)


class Choice(NamedTuple):
    """What a drawing pass of one `PositionChoice` leaves for the loss, per query."""

    log_prob: Tensor  # (B, Tq) log p(j) of the chosen positions, summed over the heads
    entropy: Tensor  # (B, Tq) H(p), summed over the heads


class PositionChoice(nn.Module):
    """The weights of hard attention from a distribution p (rows, Tq, Tk) over the keys;
    rows are b * heads + h when several heads are folded into the batch."""

    # Set while a pass draws from another generator than torch's, in any mode (diagnostics).
    generator: torch.Generator | None = None
    # Set while a pass attends softly, w = p (the Transformer's soft baseline).
    soft: bool = False

    def __init__(self, cfg: HardAttentionConfig, heads: int = 1) -> None:
        super().__init__()
        if cfg.estimator is None:
            raise ValueError("a null estimator is the architecture's: ModelConfig resolves it")
        self.estimator, self.inference = cfg.estimator, cfg.inference
        self.k, self.temperature = cfg.k, cfg.temperature
        self.heads = heads
        # Only the loss reads the records: a choice keeps one when ChoiceLoss will.
        self.records = cfg.estimator == "reinforce" or cfg.entropy_bonus > 0
        self.last: Choice | None = None

    @property
    def rule(self) -> str:
        """What it does now: soft; the estimator while it draws (training, or a generator
        set); else the inference rule."""
        if self.soft:
            return "soft"
        drawing = self.training or self.generator is not None
        return self.estimator if drawing else self.inference

    @property
    def sums(self) -> bool:
        """Whether its caller sums over the positions (exact) instead of reading `forward`."""
        return self.rule == "exact"

    def forward(self, p: Tensor) -> Tensor:
        rule = self.rule
        if rule == "soft":
            return p
        p = p / p.sum(-1, keepdim=True)  # local-p's Gaussian-scaled weights sum to less
        if rule == "exact":
            return p
        if rule == "argmax":
            return one_hot(p.argmax(-1), p)
        if rule == "k":
            top = p.topk(min(self.k, p.size(-1)), dim=-1)
            kept = torch.zeros_like(p).scatter_(-1, top.indices, top.values)
            return kept / kept.sum(-1, keepdim=True)
        return self.draw(p)

    def draw(self, p: Tensor) -> Tensor:
        """A position per query, by Gumbel-max: onehot (reinforce) or straight-through."""
        log_p = safe_log(p)
        uniform = torch.rand(p.shape, generator=self.generator, device=p.device, dtype=p.dtype)
        noise = -(-uniform.clamp_min(torch.finfo(p.dtype).tiny).log()).log()
        chosen = (log_p.detach() + noise).argmax(-1)
        weights = one_hot(chosen, p)
        if self.estimator == "gumbel":
            relaxed = torch.softmax((log_p + noise) / self.temperature, dim=-1)
            weights = weights + (relaxed - relaxed.detach())  # + 0: exactly one-hot
        if self.records:
            self.last = Choice(
                self.per_query(log_p.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)),
                self.per_query(entropy(p)),
            )
        return weights

    def per_query(self, values: Tensor) -> Tensor:
        """(B * heads, Tq) -> (B, Tq), summed over the heads."""
        return values.view(-1, self.heads, values.size(-1)).sum(1)

    def take(self) -> Choice | None:
        """The record of its last drawing pass, which it forgets."""
        last, self.last = self.last, None
        return last


class ChoiceLoss(nn.Module):
    """REINFORCE's surrogate and the entropy bonus of a model's choices (module docstring).

    `reaches_later`: whether a choice at target position t also changes the predictions
    after t (the Transformer's later positions read it), so its reward sums them too.
    The moving average is a buffer: checkpoints keep it, and a resumed run goes on with it.
    """

    def __init__(self, cfg: HardAttentionConfig, reaches_later: bool) -> None:
        super().__init__()
        self.reinforce = cfg.estimator == "reinforce"
        self.soft_baseline = self.reinforce and cfg.baseline == "soft"
        self.bonus, self.decay, self.reaches_later = cfg.entropy_bonus, cfg.decay, reaches_later
        if self.reinforce and not self.soft_baseline:
            # m = average / weight: the bias-corrected average of the rewards seen so far.
            self.register_buffer("average", torch.zeros(()))
            self.register_buffer("weight", torch.zeros(()))

    def to_go(self, values: Tensor) -> Tensor:
        """Per position t, the sum of `values` (B, T) over what a choice at t reaches."""
        if not self.reaches_later:
            return values
        return values.flip(-1).cumsum(-1).flip(-1)

    def signal(self, logits: Tensor, baseline_logits: Tensor | None, targets: Tensor) -> Tensor:
        """A = r - b (B, T), detached, 0 at padding."""
        real = (targets != PAD_ID).float()
        with torch.no_grad():
            rewards = self.to_go(token_log_likelihood(logits, targets) * real)
            if self.soft_baseline:
                baseline = self.to_go(token_log_likelihood(baseline_logits, targets) * real)
            else:
                mean = torch.where(self.weight > 0, self.average / self.weight, 0.0)
                baseline = mean * self.to_go(real)
            return (rewards - baseline) * real

    def forward(
        self,
        choices: list[PositionChoice],
        logits: Tensor,
        baseline_logits: Tensor | None,
        targets: Tensor,
    ) -> Tensor | None:
        """The surrogate of the choices' records (summed over tokens), or None if none of
        them drew; the moving average takes in this pass's rewards."""
        records = [record for choice in choices if (record := choice.take()) is not None]
        if not records:
            return None
        real = targets != PAD_ID
        loss = logits.new_zeros((), dtype=torch.float32)
        if self.reinforce:
            log_prob = sum(record.log_prob for record in records)
            signal = self.signal(logits, baseline_logits, targets)
            loss = loss - (signal * (log_prob - log_prob.detach())).sum()
            if not self.soft_baseline:
                self.take_in(logits, targets, real)
        if self.bonus:
            spread = sum(record.entropy for record in records)
            loss = loss - self.bonus * ((spread - spread.detach()) * real).sum()
        return loss

    @torch.no_grad()
    def take_in(self, logits: Tensor, targets: Tensor, real: Tensor) -> None:
        """m <- decay m + (1 - decay) (the batch's mean per-token reward), bias-corrected."""
        rewards = token_log_likelihood(logits, targets)
        batch_mean = (rewards * real).sum() / real.sum().clamp(min=1)
        self.average.mul_(self.decay).add_((1 - self.decay) * batch_mean)
        self.weight.mul_(self.decay).add_(1 - self.decay)


def token_log_likelihood(logits: Tensor, targets: Tensor) -> Tensor:
    """(B, T) log p(y_t) of the targets under `logits` (B, T, V), in float32 or wider."""
    log_probs = torch.log_softmax(
        logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32)
    )
    return log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def choice_loss(cfg: AttentionConfig, reaches_later: bool) -> ChoiceLoss | None:
    """The ChoiceLoss of a model's hard attention section, or None where its choices record
    nothing (soft attention, the exact estimator, gumbel without an entropy bonus)."""
    hard = cfg.hard
    if not cfg.is_hard or not (hard.estimator == "reinforce" or hard.entropy_bonus):
        return None
    return ChoiceLoss(hard, reaches_later)


def choices(model: nn.Module) -> list[PositionChoice]:
    return [module for module in model.modules() if isinstance(module, PositionChoice)]


@contextmanager
def drawing(model: nn.Module, generator: torch.Generator) -> Iterator[None]:
    """The model's choices draw as in training, from `generator`, for the block."""
    found = choices(model)
    for choice in found:
        choice.generator = generator
    try:
        yield
    finally:
        for choice in found:
            del choice.generator  # back to the class's None


@contextmanager
def attending_softly(model: nn.Module) -> Iterator[None]:
    """The model's choices return p itself (soft attention) for the block."""
    found = choices(model)
    for choice in found:
        choice.soft = True
    try:
        yield
    finally:
        for choice in found:
            del choice.soft
