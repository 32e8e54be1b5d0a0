"""The PPO-clip policy loss (docs/algorithm.md item 18), engine-agnostic (matches
``codea1.engine.base.LossFn``).

Per token t of response i, with ratio ρ = exp(logp − old_logp) and advantage A_i:

- surrogate ``L1 = −A·ρ``, clipped ``L2 = −A·clip(ρ, 1 − ε_low, 1 + ε_high)``, ``L = max(L1, L2)``;
- dual clip (A < 0 only): ``L = min(L, −A·c)``, which bounds the loss of a sample whose ratio blew up;
- k3 KL against the frozen reference, ``exp(ref − logp) − (ref − logp) − 1`` clamped to [−10, 10]
  (verl's ``low_var_kl``), added with ``kl_coef``;
- entropy bonus ``− entropy_coef · H``.

Each per-token term is reduced by one aggregation mode over a ragged ``mask``:
``token-mean`` (all valid tokens of the batch weigh the same; the reference's mode),
``seq-mean-token-sum`` (sum per response, mean over responses), ``seq-mean-token-mean``
(mean per response, mean over responses). Responses with an empty mask are left out of the
seq-mean modes; an all-empty batch gives a loss of 0.

The denominator of the mean over the batch is a :class:`LossNormalizer` counted over the whole
mini-batch (all its micro-batches, on all data-parallel ranks) and passed in with each slice, so each
slice's loss is its exact share of the mini-batch loss and the summed gradient does not depend on how
the mini-batch was cut. Without one, the slice itself is the whole batch.

Callers bind the hyper-parameters with ``functools.partial``. Everything is computed in float32.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch

Aggregation = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]
Weighting = Literal["tokens", "sequences"]
KL_CLAMP = 10.0
"""Bound of the per-token k3 KL (verl ``low_var_kl``)."""
LOG_RATIO_CLAMP = 20.0
"""Bound of log-ratios before exponentiation (numerical safety, as in verl)."""


ADDITIVE_STATS = ("loss/total", "loss/pg", "loss/kl", "loss/entropy")
"""Stats of :func:`policy_loss` that are a slice's share of the mini-batch value (sum them over
slices); every other stat is a mean over the slice's own tokens."""


@dataclass(frozen=True)
class LossNormalizer:
    """The denominators of the aggregation modes, counted over a whole mini-batch.

    ``tokens``: valid response tokens (the ``token-mean`` denominator). ``sequences``: responses with
    at least one valid token (the denominator of both seq-mean modes; ``seq-mean-token-mean`` also
    divides each response by its own length, which a slice always holds whole). Counts from
    several slices or ranks add with ``+``.
    """

    tokens: int
    sequences: int

    @classmethod
    def of_lengths(cls, lengths: Iterable[int]) -> LossNormalizer:
        """Counts for responses of these valid-token lengths."""
        lens = list(lengths)
        return cls(tokens=sum(lens), sequences=sum(1 for n in lens if n > 0))

    @classmethod
    def of_mask(cls, mask: torch.Tensor) -> LossNormalizer:
        """Counts for a ``[batch, len]`` mask (the batch alone is the whole mini-batch)."""
        per_seq = mask.bool().sum(dim=-1)
        return cls(tokens=int(per_seq.sum()), sequences=int((per_seq > 0).sum()))

    def __add__(self, other: LossNormalizer) -> LossNormalizer:
        return LossNormalizer(self.tokens + other.tokens, self.sequences + other.sequences)

    def denominator(self, mode: Aggregation) -> float:
        """What the summed terms of ``mode`` are divided by (at least 1, so an empty batch gives 0)."""
        if mode == "token-mean":
            return float(max(self.tokens, 1))
        if mode in ("seq-mean-token-sum", "seq-mean-token-mean"):
            return float(max(self.sequences, 1))
        raise ValueError(f"unknown aggregation {mode!r}")


def stats_weighting(mode: str) -> Weighting:
    """How the per-token mean stats of the slices of a mini-batch (micro-batches, ranks) are merged:
    weighted by each slice's response tokens under ``token-mean``, by its responses under the
    seq-mean modes, so a merged stat is what one pass over the whole mini-batch would report."""
    return "tokens" if mode == "token-mean" else "sequences"


def aggregate(
    values: torch.Tensor, mask: torch.Tensor, mode: Aggregation, normalizer: LossNormalizer | None = None
) -> torch.Tensor:
    """Reduce a ``[batch, len]`` per-token tensor to a scalar over the tokens where ``mask`` is set.

    The numerator is this slice's sum (of tokens, of per-response sums, or of per-response means);
    the denominator comes from ``normalizer`` (the whole mini-batch's counts), or from ``mask`` when
    it is None. Summing the results over the slices of a mini-batch gives the mini-batch value.
    """
    if normalizer is None:
        normalizer = LossNormalizer.of_mask(mask)
    denominator = normalizer.denominator(mode)
    m = mask.to(values.dtype)
    v = values * m
    if mode == "token-mean" or mode == "seq-mean-token-sum":
        return v.sum() / denominator
    per_seq_tokens = m.sum(dim=-1)
    return (v.sum(dim=-1) / per_seq_tokens.clamp(min=1.0)).sum() / denominator


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π‖π_ref): ``exp(ref − logp) − (ref − logp) − 1``, clamped to ±10."""
    d = (ref_logprobs - logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (torch.exp(d) - d - 1.0).clamp(-KL_CLAMP, KL_CLAMP)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    m = mask.to(x.dtype)
    return float((x * m).sum() / m.sum().clamp(min=1.0))


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    entropy: torch.Tensor | None = None,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float = 10.0,
    aggregation: Aggregation = "token-mean",
    kl_coef: float = 0.001,
    entropy_coef: float = 0.0,
    normalizer: LossNormalizer | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip loss with dual clip, k3 KL and entropy bonus; returns ``(loss, stats)``.

    Shapes: ``[batch, len]`` for log-probs, ``mask`` and ``entropy``; ``advantages`` is ``[batch]``
    (one scalar per response) or ``[batch, len]``. ``ref_logprobs`` may be ``None`` only when
    ``kl_coef`` is 0. ``dual_clip <= 0`` disables the dual clip (otherwise it must exceed 1).
    ``normalizer`` holds the counts of the whole mini-batch this slice belongs to (see
    :func:`aggregate`); None treats the slice as the whole mini-batch.
    Stats (all floats): ``loss/total``, ``loss/pg``, ``loss/kl``, ``loss/entropy`` (this slice's
    share, see :data:`ADDITIVE_STATS`), ``loss/clipfrac`` (tokens where the ratio clip was active),
    ``loss/clipfrac_dual``, ``loss/approx_kl`` (mean of old_logp − logp),
    ``loss/ratio_min|max|mean`` over the slice's masked tokens.
    """
    if 0 < dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (or <= 0 to disable), got {dual_clip}")
    if kl_coef and ref_logprobs is None:
        raise ValueError("ref_logprobs is required when kl_coef != 0")
    logp = logprobs.float()
    old = old_logprobs.float().detach()
    mask_b = mask.bool()
    adv = advantages.float().detach()
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    adv = adv.expand_as(logp)

    log_ratio = (logp - old).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss_ppo = torch.maximum(loss_unclipped, loss_clipped)
    if dual_clip > 0:
        loss_dual = -adv * dual_clip
        dual_active = (adv < 0) & (loss_ppo > loss_dual)
        per_token = torch.where(adv < 0, torch.minimum(loss_ppo, loss_dual), loss_ppo)
    else:
        dual_active = torch.zeros_like(mask_b)
        per_token = loss_ppo
    pg = aggregate(per_token, mask_b, aggregation, normalizer)
    total = pg

    kl_value = torch.zeros((), dtype=logp.dtype)
    if ref_logprobs is not None:
        kl_value = aggregate(k3_kl(logp, ref_logprobs.float().detach()), mask_b, aggregation, normalizer)
        if kl_coef:
            total = total + kl_coef * kl_value
    ent_value = torch.zeros((), dtype=logp.dtype)
    if entropy is not None:
        ent_value = aggregate(entropy.float(), mask_b, aggregation, normalizer)
        if entropy_coef:
            total = total - entropy_coef * ent_value

    with torch.no_grad():
        masked_ratio = ratio[mask_b]
        stats = {
            "loss/total": float(total.detach()),
            "loss/pg": float(pg.detach()),
            "loss/kl": float(kl_value.detach()),
            "loss/entropy": float(ent_value.detach()),
            "loss/clipfrac": _masked_mean((loss_clipped > loss_unclipped).float(), mask_b),
            "loss/clipfrac_dual": _masked_mean(dual_active.float(), mask_b),
            "loss/approx_kl": _masked_mean(-log_ratio, mask_b),
            "loss/ratio_min": float(masked_ratio.min()) if masked_ratio.numel() else 1.0,
            "loss/ratio_max": float(masked_ratio.max()) if masked_ratio.numel() else 1.0,
            "loss/ratio_mean": float(masked_ratio.mean()) if masked_ratio.numel() else 1.0,
        }
    return total, stats
