"""Paired bootstrap over problems: is the after-training score different from the before score?

Both scores are means over the same problems, so the noise that matters is which problems were drawn
(and, with few samples per problem, the sampling noise inside each problem's score). The paired
bootstrap resamples problem indices with replacement, recomputes ``mean(after) - mean(before)`` on
each resample, and reads the confidence interval off the percentiles of those deltas (Efron &
Tibshirani 1993, ch. 13; the standard choice for benchmark comparisons, e.g. Koehn 2004).

Pure: numpy only, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PairedDelta:
    """The difference ``after - before`` of two per-problem score vectors, with its bootstrap noise.

    Scores are fractions in [0, 1]; ``before``, ``after``, ``delta`` and the interval are their means.
    ``p_not_better`` is the fraction of resamples whose delta is <= 0 (a one-sided bootstrap p-value
    for "after is better"); ``p_one_sided`` the one-sided sign-flip permutation p-value of the same
    hypothesis (:func:`sign_flip_p`), ``p_two_sided`` its two-sided form, the p every output reports
    unless a one-sided one is asked for (and then labelled); ``improved`` / ``worsened`` count
    problems whose own score went up / down.
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
    p_one_sided: float = 1.0
    p_two_sided: float = 1.0
    """The two-sided sign-flip p-value of "the mean paired difference is not 0" (``|Δ|`` at least the
    observed one): the p of a comparison with no direction named in advance, such as two methods."""


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
    deltas = np.empty(resamples, dtype=np.float64)
    for rows, idx in _resampled_indices(diff.size, resamples, seed):
        deltas[rows] = diff[idx].mean(axis=1)
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
        p_one_sided=sign_flip_p(diff, seed=seed),
        p_two_sided=sign_flip_p(diff, seed=seed, two_sided=True),
    )


def _resampled_indices(n: int, resamples: int, seed: int) -> Iterator[tuple[slice, np.ndarray]]:
    """Bootstrap resamples of ``n`` problem indices, in chunks: ``(rows, idx)`` with ``idx`` of shape
    ``(rows.stop - rows.start, n)``; the index matrix of one chunk stays near 16 MB."""
    rng = np.random.default_rng(seed)
    chunk = max(1, 2_000_000 // n)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        yield slice(start, stop), rng.integers(0, n, size=(stop - start, n))


EXACT_SIGN_FLIP_MAX = 16
"""Up to this many problems :func:`sign_flip_p` enumerates every sign pattern (2^16)."""


def sign_flip_p(
    diff: Sequence[float], *, draws: int = 200_000, seed: int = 0, two_sided: bool = False
) -> float:
    """One-sided sign-flip permutation p-value of "the mean paired difference is > 0".

    Under the null hypothesis that training changed nothing, each problem's difference is as likely
    negative as positive; the p-value is the share of the 2^n sign patterns whose mean is at least
    the observed one (the identity included, so p >= 2^-n). Exact for n <= ``EXACT_SIGN_FLIP_MAX``,
    else ``draws`` random patterns (seeded) plus the observed one. Fisher 1935; Good 2005, ch. 3.
    ``two_sided``: the share whose mean is at least as far from 0 as the observed one, either way.
    """
    d = np.asarray(diff, dtype=np.float64)
    if d.ndim != 1 or d.size == 0 or not np.isfinite(d).all():
        raise ValueError("sign_flip_p: need a non-empty vector of finite differences")
    hits, total = 0, 0
    for signs in _sign_patterns(d.size, draws, seed):
        hits += int(_at_least(d.mean(), (signs @ d) / d.size, two_sided, float(np.abs(d).max())).sum())
        total += len(signs)
    return hits / total


def _at_least(observed: float, values: np.ndarray, two_sided: bool, scale: float) -> np.ndarray:
    """Which permuted statistics are at least as extreme as the observed one (ties, up to rounding
    at the size ``scale`` of the numbers, count)."""
    if two_sided:
        observed, values = abs(observed), np.abs(values)
    return values >= observed - 1e-12 * max(1.0, scale)


def _sign_patterns(n: int, draws: int, seed: int) -> Iterator[np.ndarray]:
    """The sign patterns of a sign-flip test over ``n`` problems, in chunks of ``(m, n)`` arrays of
    ±1: all 2^n for n <= ``EXACT_SIGN_FLIP_MAX``, else the observed one (all +1) and ``draws`` random
    ones (seeded)."""
    if n <= EXACT_SIGN_FLIP_MAX:
        patterns = np.arange(1 << n, dtype=np.int64)[:, None] >> np.arange(n, dtype=np.int64)
        yield 1.0 - 2.0 * (patterns & 1)
        return
    yield np.ones((1, n))
    rng = np.random.default_rng(seed)
    chunk = max(1, 2_000_000 // n)
    for start in range(0, draws, chunk):
        yield rng.choice((-1.0, 1.0), size=(min(chunk, draws - start), n))


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


Statistic = Callable[[np.ndarray], np.ndarray]
"""An estimator over problems: per-problem feature rows of shape ``(..., n, f)`` to the estimate's
values, shape ``(...)`` (a mean over problems, a pooled ratio, a product of two means). Features may
be NaN where a problem has no value (a problem without live mutants); the statistic handles that."""


def paired_statistic(
    before: np.ndarray,
    after: np.ndarray,
    statistic: Statistic,
    *,
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    draws: int = 200_000,
) -> PairedDelta:
    """:func:`paired_bootstrap` for any estimator: ``statistic(after) - statistic(before)`` over
    problems, with ``before[i]`` and ``after[i]`` the feature rows of problem ``i`` (shape ``(n, f)``).

    The bootstrap resamples problem indices, one set for both sides (the resamples of
    :func:`paired_bootstrap`, seed for seed); the sign-flip test swaps the two sides' rows of the
    problems a pattern flips (the patterns of :func:`sign_flip_p`), so for a mean of one feature
    both equal :func:`paired_bootstrap` exactly. ``improved`` / ``worsened`` compare each problem's
    own statistic. Raises ``ValueError`` on unequal or empty inputs or bad settings.
    """
    b = np.asarray(before, dtype=np.float64)
    a = np.asarray(after, dtype=np.float64)
    if b.ndim != 2 or a.shape != b.shape or b.shape[0] == 0:
        raise ValueError(f"paired_statistic: need two equal, non-empty (problems, features) arrays, "
                         f"got {b.shape} and {a.shape}")  # fmt: skip
    if resamples < 1:
        raise ValueError(f"paired_statistic: resamples must be >= 1, got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"paired_statistic: confidence must be in (0, 1), got {confidence}")
    n = b.shape[0]
    deltas = np.empty(resamples, dtype=np.float64)
    for rows, idx in _resampled_indices(n, resamples, seed):
        deltas[rows] = statistic(a[idx]) - statistic(b[idx])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(deltas, [tail, 1.0 - tail])
    observed = float(statistic(a) - statistic(b))
    one = two = total = 0
    for signs in _sign_patterns(n, draws, seed):
        flip = (signs < 0)[:, :, None]
        swapped = statistic(np.where(flip, b, a)) - statistic(np.where(flip, a, b))
        one += int(_at_least(observed, swapped, False, abs(observed)).sum())
        two += int(_at_least(observed, swapped, True, abs(observed)).sum())
        total += len(signs)
    own_a, own_b = statistic(a[:, None, :]), statistic(b[:, None, :])  # each problem alone
    return PairedDelta(
        problems=n,
        before=float(statistic(b)),
        after=float(statistic(a)),
        delta=observed,
        ci_low=float(low),
        ci_high=float(high),
        confidence=confidence,
        p_not_better=float((deltas <= 0.0).mean()),
        improved=int((own_a > own_b).sum()),
        worsened=int((own_a < own_b).sum()),
        resamples=resamples,
        p_one_sided=one / total,
        p_two_sided=two / total,
    )


def statistic_interval(
    rows: np.ndarray,
    statistic: Statistic,
    *,
    resamples: int = 2_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval over problems of ``statistic(rows)`` (rows: ``(n, f)``), the
    band of one evaluation point around the very estimate it plots. ``ValueError`` when empty."""
    x = np.asarray(rows, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"statistic_interval: need a non-empty (problems, features) array, got {x.shape}")
    values = np.empty(resamples, dtype=np.float64)
    for chunk, idx in _resampled_indices(x.shape[0], resamples, seed):
        values[chunk] = statistic(x[idx])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)
