"""Sample-based estimators of code-generation accuracy: unbiased pass@k and avg@k (pure, no I/O).

``pass@k`` is the probability that at least one of k samples drawn without replacement from the n
generated ones is correct (Chen et al. 2021): ``1 - C(n-c, k) / C(n, k)``. ``avg@k`` is the mean
correctness of the first k samples (the metric the paper reports as avg@32).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

STANDARD_KS = (1, 8, 16, 32)
"""The k values the paper logs for n = 32 samples (64 is skipped because it exceeds n)."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with ``n`` samples of which ``c`` are correct.

    Computed as ``1 - prod_{i=n-c+1..n} (1 - k / i)``, which equals ``1 - C(n-c, k)/C(n, k)`` without
    huge binomials. Raises ``ValueError`` unless ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def mean_pass_at_k(num_samples: Sequence[int], num_correct: Sequence[int], k: int) -> float:
    """pass@k averaged over problems (each with its own n and c); a fraction in [0, 1]."""
    if len(num_samples) != len(num_correct):
        raise ValueError("mean_pass_at_k: num_samples and num_correct differ in length")
    if not num_samples:
        return 0.0
    return float(np.mean([pass_at_k(n, c, k) for n, c in zip(num_samples, num_correct, strict=False)]))


def avg_at_k(correct: Sequence[bool], k: int) -> float:
    """Mean correctness of the first ``k`` samples of one problem; a fraction in [0, 1]."""
    if not 1 <= k <= len(correct):
        raise ValueError(f"avg_at_k: need 1 <= k <= n, got n={len(correct)}, k={k}")
    return float(np.mean(np.asarray(correct[:k], dtype=np.float64)))


def mean_avg_at_k(correct_per_problem: Sequence[Sequence[bool]], k: int) -> float:
    """avg@k averaged over problems; a fraction in [0, 1]."""
    if not correct_per_problem:
        return 0.0
    return float(np.mean([avg_at_k(row, k) for row in correct_per_problem]))


def ks_for(n: int, candidates: Sequence[int] = STANDARD_KS) -> list[int]:
    """The k values to report for ``n`` samples per problem: ``candidates`` that do not exceed n."""
    return [k for k in candidates if k <= n]
