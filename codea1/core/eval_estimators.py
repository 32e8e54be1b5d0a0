"""The evaluation's headline estimates as functions of per-problem rows, one definition each.

An evaluation point's per-problem records (``code-*.jsonl``: ``correct``; ``tests-*.jsonl``: ``k``,
``tests``, ``valid``, ``killed``, ``mutants``, ``equivalent``) give each problem a row of features,
and an estimator maps the rows of the problems to the number the evaluation reports, exactly as
``summarize_code`` / ``summarize_tests`` compute it (docs/metrics.md):

* ``coder/pass@1``: the mean over problems of each problem's share of correct samples;
* ``tester/validity``: valid tests over tests considered, pooled over problems (a ratio of sums);
* ``tester/pass@k``: the mean over problems of valid tests / k;
* ``tester/mut@k``: the mean, over the problems with live (non-equivalent) mutants, of the share
  of them that the valid tests kill;
* ``tester/Mul``: pass@k × mut@k (the paper's product of the two means, not a per-problem product).

The report's bands and ``codea1 compare`` resample these rows (:mod:`codea1.core.bootstrap`), so a
band is always a band of the very estimate plotted beside it. Values are fractions; the reports
print percent. Pure: numpy only, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from codea1.core.bootstrap import Statistic


@dataclass(frozen=True)
class Estimator:
    """One evaluation estimate: which results file its rows come from, how a record becomes a row,
    and the statistic over rows (``(..., n, f) -> (...)``, a fraction)."""

    name: str
    """The metric's name under ``eval/``: ``coder/pass@1``, ``tester/mut@5`` ..."""
    task: Literal["code", "tests"]
    features: Callable[[Mapping[str, Any]], tuple[float, ...]]
    """One record's row; raises ``KeyError`` / ``TypeError`` / ``ValueError`` on a malformed record."""
    statistic: Statistic

    def rows(self, records: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """The ``(problems, features)`` array of ``records``; ``ValueError`` names a malformed one."""
        out = []
        for i, r in enumerate(records):
            try:
                out.append(self.features(r))
            except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
                raise ValueError(f"record {i} ({r.get('id', '?')}) has no {self.name} ({e!r})") from None
        return np.array(out, dtype=np.float64).reshape(len(out), -1)

    def value(self, records: Sequence[Mapping[str, Any]]) -> float:
        """The estimate over ``records`` (a fraction)."""
        return float(self.statistic(self.rows(records)))


def _mean(x: np.ndarray) -> np.ndarray:
    return x[..., 0].mean(axis=-1)


def _nan_mean(values: np.ndarray) -> np.ndarray:
    """Mean over the last axis of the finite values; 0 where there is none (as summarize_tests)."""
    finite = np.isfinite(values)
    count = finite.sum(axis=-1)
    total = np.where(finite, values, 0.0).sum(axis=-1)
    return np.divide(total, count, out=np.zeros(np.shape(total)), where=count > 0)


def _pooled_ratio(x: np.ndarray) -> np.ndarray:
    tops, bottoms = x[..., 0].sum(axis=-1), x[..., 1].sum(axis=-1)
    return np.divide(tops, bottoms, out=np.zeros(np.shape(tops)), where=bottoms > 0)


def _mul(x: np.ndarray) -> np.ndarray:
    return x[..., 0].mean(axis=-1) * _nan_mean(x[..., 1])


def _count(r: Mapping[str, Any], key: str) -> int:
    value = r[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} is not a count")
    return value


def _pass_rate(r: Mapping[str, Any]) -> tuple[float, ...]:
    correct = r["correct"]
    if not isinstance(correct, list) or not correct:
        raise ValueError("no samples")
    return (sum(bool(c) for c in correct) / len(correct),)


def _valid_of_considered(r: Mapping[str, Any]) -> tuple[float, ...]:
    return (float(_count(r, "valid")), float(len(r["tests"])))


def _valid_of_k(r: Mapping[str, Any]) -> float:
    k = _count(r, "k")
    return min(_count(r, "valid"), k) / k if k else 0.0


def _killed(r: Mapping[str, Any]) -> float:
    live = _count(r, "mutants") - _count(r, "equivalent")
    return _count(r, "killed") / live if live > 0 else math.nan


ESTIMATORS: tuple[Estimator, ...] = (
    Estimator("coder/pass@1", "code", _pass_rate, _mean),
    Estimator("tester/validity", "tests", _valid_of_considered, _pooled_ratio),
    Estimator("tester/pass@k", "tests", lambda r: (_valid_of_k(r),), _mean),
    Estimator("tester/mut@k", "tests", lambda r: (_killed(r),), lambda x: _nan_mean(x[..., 0])),
    Estimator("tester/Mul", "tests", lambda r: (_valid_of_k(r), _killed(r)), _mul),
)
"""The estimates ``codea1 compare`` pairs and the report bands, in the order they are printed;
``@k`` stands for the suite size ``eval.tests`` (the records' ``k``)."""

_AT_K = re.compile(r"@(\d+)$")


def estimator_for(name: str) -> Estimator | None:
    """The estimator of a metric name (``coder/pass@1``, ``tester/mut@5``; an ``eval/`` prefix is
    allowed), named with its own k; None for metrics without a per-problem definition here."""
    name = name.removeprefix("eval/")
    generic = _AT_K.sub("@k", name) if name.startswith("tester/") else name
    for e in ESTIMATORS:
        if e.name == generic:
            return Estimator(name, e.task, e.features, e.statistic)
    return None


def named_for(estimator: Estimator, k: int) -> str:
    """``estimator``'s name with the suite size filled in (``tester/mut@k`` -> ``tester/mut@4``)."""
    return estimator.name.replace("@k", f"@{k}")
