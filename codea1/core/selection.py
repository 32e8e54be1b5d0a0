"""Which Test-LLM groups are trained on (docs/algorithm.md, step 8 and item 16, "TOPVAR").

A Test-LLM group is the set of suites written for one code. For each problem we keep the
``update_n`` codes whose suite rewards have the largest spread (population standard deviation,
``unbiased=False`` as in the reference). Ties go to the lowest code index, so the choice is
deterministic (the reference's ``torch.topk`` picks an arbitrary one when stds tie, e.g. all zero).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

STD_DECIMALS = 12
"""Spreads are rounded to this many decimals before ranking, so groups whose rewards are all equal
(std zero up to float rounding, e.g. eight times 0.1) tie exactly and fall back to the index order."""


def group_spread(suite_rewards: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """Population std of each row of a ``[n_codes, n_suites]`` reward array (0 for empty rows)."""
    r = np.asarray(suite_rewards, dtype=np.float64)
    if r.size == 0 and r.ndim == 1:
        r = r.reshape(0, 0)
    if r.ndim != 2:
        raise ValueError(f"suite rewards must be [n_codes, n_suites], got shape {r.shape}")
    if r.shape[1] == 0:
        return np.zeros(r.shape[0])
    return np.round(r.std(axis=1, ddof=0), STD_DECIMALS)


def select_groups(suite_rewards: np.ndarray | Sequence[Sequence[float]], update_n: int) -> list[int]:
    """Indices of the codes whose suites train the Test LLM, largest spread first.

    ``update_n = 0`` keeps every code (in index order); otherwise ``min(update_n, n_codes)`` codes.
    """
    if update_n < 0:
        raise ValueError(f"update_n must be >= 0, got {update_n}")
    spread = group_spread(suite_rewards)
    if update_n == 0:
        return list(range(len(spread)))
    order = np.argsort(-spread, kind="stable")
    return [int(i) for i in order[:update_n]]


def select_groups_batch(
    per_problem: Sequence[np.ndarray | Sequence[Sequence[float]]], update_n: int
) -> list[list[int]]:
    """:func:`select_groups` for each problem of a batch (problems may have different code counts)."""
    return [select_groups(r, update_n) for r in per_problem]
