"""Paired bootstrap over problems: is the after-training score different from the before score?

Both scores are means over the same problems, so the noise that matters is which problems were drawn
(and, with few samples per problem, the sampling noise inside each problem's score). The paired
bootstrap resamples problem indices with replacement, recomputes ``mean(after) - mean(before)`` on
each resample, and reads the confidence interval off the percentiles of those deltas (Efron &
Tibshirani 1993, ch. 13; the standard choice for benchmark comparisons, e.g. Koehn 2004).

Pure: numpy only, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PairedDelta:
    """The difference ``after - before`` of two per-problem score vectors, with its bootstrap noise.

    Scores are fractions in [0, 1]; ``before``, ``after``, ``delta`` and the interval are their means.
    ``p_not_better`` is the fraction of resamples whose delta is <= 0 (a one-sided bootstrap p-value
    for "after is better"); ``p_sign_flip`` the one-sided sign-flip permutation p-value of the same
    hypothesis (:func:`sign_flip_p`); ``improved`` / ``worsened`` count problems whose own score went
    up / down.
    """

    problems: int
    before: float
    after: float
    delta: float
    ci_low: float
    ci_high: float
    confidence: float
    p_not_better: float
    improved: int
    worsened: int
    resamples: int
    p_sign_flip: float = 1.0


def paired_bootstrap(
    before: Sequence[float],
    after: Sequence[float],
    *,
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> PairedDelta:
    """Paired percentile bootstrap of ``mean(after) - mean(before)`` over problems.

    ``before[i]`` and ``after[i]`` are the scores of problem ``i`` (e.g. its fraction of correct
    samples). Deterministic for a given ``seed``. Raises ``ValueError`` on empty or unequal inputs,
    non-finite scores, ``resamples < 1`` or a confidence outside (0, 1).
    """
    b = np.asarray(before, dtype=np.float64)
    a = np.asarray(after, dtype=np.float64)
    if b.ndim != 1 or a.shape != b.shape:
        raise ValueError(
            f"paired_bootstrap: need two equal-length score vectors, got {b.shape} and {a.shape}"
        )
    if b.size == 0:
        raise ValueError("paired_bootstrap: no problems to compare")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("paired_bootstrap: scores must be finite")
    if resamples < 1:
        raise ValueError(f"paired_bootstrap: resamples must be >= 1, got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"paired_bootstrap: confidence must be in (0, 1), got {confidence}")
    diff = a - b
    rng = np.random.default_rng(seed)
    deltas = np.empty(resamples, dtype=np.float64)
    chunk = max(1, 2_000_000 // diff.size)  # bound the index matrix to ~16 MB
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, diff.size, size=(stop - start, diff.size))
        deltas[start:stop] = diff[idx].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(deltas, [tail, 1.0 - tail])
    return PairedDelta(
        problems=int(diff.size),
        before=float(b.mean()),
        after=float(a.mean()),
        delta=float(diff.mean()),
        ci_low=float(low),
        ci_high=float(high),
        confidence=confidence,
        p_not_better=float((deltas <= 0.0).mean()),
        improved=int((diff > 0).sum()),
        worsened=int((diff < 0).sum()),
        resamples=resamples,
        p_sign_flip=sign_flip_p(diff, seed=seed),
    )


EXACT_SIGN_FLIP_MAX = 16
"""Up to this many problems :func:`sign_flip_p` enumerates every sign pattern (2^16)."""


def sign_flip_p(diff: Sequence[float], *, draws: int = 200_000, seed: int = 0) -> float:
    """One-sided sign-flip permutation p-value of "the mean paired difference is > 0".

    Under the null hypothesis that training changed nothing, each problem's difference is as likely
    negative as positive; the p-value is the share of the 2^n sign patterns whose mean is at least
    the observed one (the identity included, so p >= 2^-n). Exact for n <= ``EXACT_SIGN_FLIP_MAX``,
    else ``draws`` random patterns (seeded) plus the observed one. Fisher 1935; Good 2005, ch. 3.
    """
    d = np.asarray(diff, dtype=np.float64)
    if d.ndim != 1 or d.size == 0 or not np.isfinite(d).all():
        raise ValueError("sign_flip_p: need a non-empty vector of finite differences")
    observed = d.mean() - 1e-12 * max(1.0, float(np.abs(d).max()))  # ties count as "at least"
    n = d.size
    if n <= EXACT_SIGN_FLIP_MAX:
        patterns = np.arange(1 << n, dtype=np.int64)[:, None] >> np.arange(n, dtype=np.int64)
        signs = 1.0 - 2.0 * (patterns & 1)
        return float(((signs @ d) / n >= observed).mean())
    rng = np.random.default_rng(seed)
    hits = 1  # the observed pattern
    chunk = max(1, 2_000_000 // n)
    for start in range(0, draws, chunk):
        signs = rng.choice((-1.0, 1.0), size=(min(chunk, draws - start), n))
        hits += int(((signs @ d) / n >= observed).sum())
    return hits / (draws + 1)


def ratio_interval(
    numerators: Sequence[float],
    denominators: Sequence[float],
    *,
    resamples: int = 2_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval over problems of ``sum(num) / sum(den)``.

    With denominators of 1 it is the interval of the mean of per-problem scores (a pass rate);
    with per-problem counts it is that of a pooled ratio (valid tests over tests written). A
    resample whose denominators sum to 0 counts as 0. Deterministic for a given ``seed``; raises
    ``ValueError`` on empty or unequal inputs.
    """
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    if num.ndim != 1 or num.shape != den.shape or num.size == 0:
        raise ValueError(
            f"ratio_interval: need two equal, non-empty vectors, got {num.shape} and {den.shape}"
        )
    idx = np.random.default_rng(seed).integers(0, num.size, size=(resamples, num.size))
    tops, bottoms = num[idx].sum(axis=1), den[idx].sum(axis=1)
    ratios = np.divide(tops, bottoms, out=np.zeros_like(tops), where=bottoms > 0)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return float(low), float(high)
