"""Code and test rewards (docs/algorithm.md, items 4–11), computed from plain pass/fail data (no I/O,
no models).

Inputs are per code (:class:`CodeOutcome`): whether the code loaded, its results on the problem's
history tests, and for each suite written for it (:class:`SuiteOutcome`) its results on that suite's
usable tests V_k (generation order) plus the counts of what made the suite lose validity.

Two implementations return identical :class:`CodeRewards` values: :func:`rewards_reference` (one
readable loop per suite, the specification) and :func:`rewards` (numpy, vectorised over every suite
of a batch; the one callers use). Everything is computed in float64, never bf16 (docs/algorithm.md bug R9).
Both add the tester terms of :mod:`codea1.core.reward_terms` whose weight is above 0 (``term_weights``)
to R_T; with none, R_T is the paper's, bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from codea1.core.reward_terms import RewardTerm, TermValue, active_terms


@dataclass(frozen=True)
class SuiteOutcome:
    """One test suite, seen by the code it was written for.

    ``passes[i]``: the code passed the i-th test of V_k (the suite's distinct tests whose oracle is
    usable, in generation order). ``wrong_predictions``: how many tests of V_k carry a predicted value
    that differs from the oracle (they stay in V_k but count against validity). ``invalid``: tests
    that are not in V_k, by reason (parser rejections such as ``syntax``/``operator``/``duplicate``,
    and ``oracle_invalid`` for calls the reference could not run). ``nonprintable_ratio``: share of
    the raw response's characters outside ``string.printable``. ``terms``: the input of each reward
    term of :mod:`codea1.core.reward_terms` that scoring gathered, by term name (a term with a weight
    whose input is missing is worth 0).
    """

    passes: tuple[bool, ...]
    wrong_predictions: int = 0
    invalid: Mapping[str, int] = field(default_factory=dict)
    nonprintable_ratio: float = 0.0
    terms: Mapping[str, Any] = field(default_factory=dict)

    @property
    def n_invalid(self) -> int:
        """inv_k: everything that lowers validity (rejections + oracle-invalid + wrong predictions)."""
        return int(sum(self.invalid.values())) + self.wrong_predictions

    @property
    def n_asserts(self) -> int:
        """The suite's own size: usable tests plus the tests and asserts that are not usable."""
        return len(self.passes) + int(sum(self.invalid.values()))


@dataclass(frozen=True)
class CodeOutcome:
    """One code sample: ``valid`` = its definitions loaded; ``history_passes`` over H_q; its suites."""

    valid: bool
    history_passes: tuple[bool, ...]
    suites: tuple[SuiteOutcome, ...]


@dataclass(frozen=True)
class SuiteReward:
    """R_T of one suite and the terms it is made of (see docs/algorithm.md)."""

    reward: float
    """R_T(c, k)."""
    r_code: float
    """r_C(c, k): this suite's contribution to the code reward."""
    n_valid: int
    """|V_k|."""
    passed: int
    """Tests of V_k the code passed."""
    n_invalid: int
    """inv_k."""
    invalid_by_reason: dict[str, int]
    """inv_k split by reason (``wrong_prediction`` included)."""
    denominator: int
    """N (fixed) or the suite's own size (``normalize_by_suite``)."""
    failures_counted: int
    """Failures among the first ``denominator`` tests of V_k."""
    pass_rate: float
    """P_k (0 when V_k is empty)."""
    fail_rate: float
    """F_k."""
    validity: float
    """Val_k."""
    adversarial: float
    """Adv_k (history-adjusted)."""
    nonprintable_ratio: float
    """ρ_k (subtracted when the penalty is on)."""
    terms: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per term with a weight above 0: its ``value``, ``weight``, ``reward`` (valid(c)·weight·value,
    what R_T gained) and the counts behind the value; empty without such a term."""

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (``terms`` only when a term is on)."""
        d = asdict(self)
        if not self.terms:
            del d["terms"]
        return d


@dataclass(frozen=True)
class CodeRewards:
    """R_C of one code, R_T of each of its suites, and the history terms both share."""

    reward: float
    """R_C(c)."""
    valid: bool
    """valid(c)."""
    history_total: int
    """|H_q|."""
    history_passed: int
    """History tests the code passed."""
    history_pass_rate: float
    """P_H (0 without history)."""
    history_fail_rate: float
    """F_H = 1 − P_H (0 without history)."""
    suites: tuple[SuiteReward, ...]

    @property
    def suite_rewards(self) -> tuple[float, ...]:
        """R_T of each suite, in order."""
        return tuple(s.reward for s in self.suites)

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (suites nested)."""
        d = asdict(self)
        d["suites"] = [s.to_dict() for s in self.suites]
        return d


def _invalid_by_reason(suite: SuiteOutcome) -> dict[str, int]:
    out = {k: int(v) for k, v in suite.invalid.items() if v}
    if suite.wrong_predictions:
        out["wrong_prediction"] = suite.wrong_predictions
    return out


def _term(term: RewardTerm, weight: float, suite: SuiteOutcome, counted: int) -> tuple[float, dict]:
    """One term of one suite: its value and its breakdown entry (without ``reward``)."""
    given = suite.terms.get(term.name)
    tv = term.compute(given, counted) if given is not None else TermValue(0.0)
    return tv.value, {"value": tv.value, "weight": weight, **tv.detail}


def _check(alpha: float, n_norm: int) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if n_norm < 1:
        raise ValueError(f"n_norm must be >= 1, got {n_norm}")


# --------------------------------------------------------------------------------------------------
# Reference implementation: one loop per suite, written to be read next to docs/algorithm.md items 9–10
# --------------------------------------------------------------------------------------------------


def rewards_reference(
    codes: Sequence[CodeOutcome],
    *,
    alpha: float = 0.5,
    n_norm: int = 8,
    normalize_by_suite: bool = False,
    nonprintable_penalty: bool = True,
    term_weights: Mapping[str, float] | None = None,
) -> list[CodeRewards]:
    """R_C and R_T for each code, one suite at a time (the readable specification of :func:`rewards`)."""
    _check(alpha, n_norm)
    terms = active_terms(term_weights)
    out = []
    for code in codes:
        n_hist = len(code.history_passes)
        hist_passed = sum(bool(p) for p in code.history_passes) if code.valid else 0
        p_hist = hist_passed / n_hist if n_hist else 0.0
        f_hist = 1.0 - p_hist if n_hist else 0.0
        suites = []
        for suite in code.suites:
            n_valid = len(suite.passes)
            passed = sum(bool(p) for p in suite.passes) if code.valid else 0
            p_new = passed / n_valid if n_valid else 0.0
            # r_C(c, k): ½ history + ½ new, the single available one, or 0; 0 for invalid code.
            if not code.valid:
                r_code = 0.0
            elif n_hist and n_valid:
                r_code = 0.5 * (p_hist + p_new)
            elif n_hist:
                r_code = p_hist
            elif n_valid:
                r_code = p_new
            else:
                r_code = 0.0
            denom = suite.n_asserts if normalize_by_suite else n_norm
            n_inv = suite.n_invalid
            if denom > 0:
                first = suite.passes[:denom]
                failures = sum(1 for p in first if not p) if code.valid else len(first)
                fail_rate = failures / denom
                validity = min(max(min(n_valid / denom, 1.0 - n_inv / denom), 0.0), 1.0)
            else:
                failures, fail_rate, validity = 0, 0.0, 0.0
            if n_hist and n_valid:
                adversarial = (fail_rate - f_hist + 1.0) / 2.0
            elif n_valid:
                adversarial = fail_rate
            else:
                adversarial = 0.0
            rho = suite.nonprintable_ratio if nonprintable_penalty else 0.0
            valid_c = 1.0 if code.valid else 0.0
            inner = alpha * validity + (1.0 - alpha) * adversarial
            breakdown = {}
            for term, weight in terms:  # each term's input, over the first D tests of V_k
                value, breakdown[term.name] = _term(term, weight, suite, denom)
                inner = inner + weight * value
                breakdown[term.name]["reward"] = valid_c * (weight * value)
            reward = -rho + valid_c * inner
            suites.append(
                SuiteReward(
                    reward=reward,
                    r_code=r_code,
                    n_valid=n_valid,
                    passed=passed,
                    n_invalid=n_inv,
                    invalid_by_reason=_invalid_by_reason(suite),
                    denominator=denom,
                    failures_counted=failures,
                    pass_rate=p_new,
                    fail_rate=fail_rate,
                    validity=validity,
                    adversarial=adversarial,
                    nonprintable_ratio=suite.nonprintable_ratio,
                    terms=breakdown,
                )
            )
        if not code.valid:
            r_c = 0.0
        elif suites:
            r_c = sum(s.r_code for s in suites) / len(suites)
        else:  # no suite at all: only the history can say something
            r_c = p_hist
        out.append(CodeRewards(r_c, code.valid, n_hist, hist_passed, p_hist, f_hist, tuple(suites)))
    return out


# --------------------------------------------------------------------------------------------------
# Vectorised implementation: every suite of the batch in one padded [S, T] array
# --------------------------------------------------------------------------------------------------


def rewards(
    codes: Sequence[CodeOutcome],
    *,
    alpha: float = 0.5,
    n_norm: int = 8,
    normalize_by_suite: bool = False,
    nonprintable_penalty: bool = True,
    term_weights: Mapping[str, float] | None = None,
) -> list[CodeRewards]:
    """R_C and R_T for each code, vectorised over all suites (same values as :func:`rewards_reference`)."""
    _check(alpha, n_norm)
    terms = active_terms(term_weights)
    n_codes = len(codes)
    if n_codes == 0:
        return []
    valid = np.array([c.valid for c in codes], dtype=bool)
    # History, padded to [C, H].
    n_hist = np.array([len(c.history_passes) for c in codes], dtype=np.int64)
    hist = np.zeros((n_codes, max(int(n_hist.max()), 1)), dtype=bool)
    for i, c in enumerate(codes):
        hist[i, : n_hist[i]] = c.history_passes
    hist_passed = np.where(valid, hist.sum(axis=1), 0)
    has_hist = n_hist > 0
    p_hist = np.divide(hist_passed, n_hist, out=np.zeros(n_codes), where=has_hist)
    f_hist = np.where(has_hist, 1.0 - p_hist, 0.0)

    # Suites, flattened to [S] with owner index, pass matrix padded to [S, T].
    suites = [s for c in codes for s in c.suites]
    owner = np.repeat(np.arange(n_codes), [len(c.suites) for c in codes])
    n_suites = len(suites)
    n_valid = np.array([len(s.passes) for s in suites], dtype=np.int64)
    width = max(int(n_valid.max()) if n_suites else 0, 1)
    passes = np.zeros((n_suites, width), dtype=bool)
    for j, s in enumerate(suites):
        passes[j, : n_valid[j]] = s.passes
    in_v = np.arange(width)[None, :] < n_valid[:, None]
    s_valid = valid[owner]
    passes &= s_valid[:, None]
    passed = passes.sum(axis=1)
    n_inv = np.array([s.n_invalid for s in suites], dtype=np.int64)
    n_asserts = np.array([s.n_asserts for s in suites], dtype=np.int64)
    rho = np.array([s.nonprintable_ratio for s in suites], dtype=np.float64)

    has_v = n_valid > 0
    s_has_hist = has_hist[owner]
    p_new = np.divide(passed, n_valid, out=np.zeros(n_suites), where=has_v)
    both = s_has_hist & has_v
    r_code = np.select(
        [~s_valid, both, s_has_hist, has_v], [0.0, 0.5 * (p_hist[owner] + p_new), p_hist[owner], p_new], 0.0
    )

    denom = n_asserts if normalize_by_suite else np.full(n_suites, n_norm, dtype=np.int64)
    counted = in_v & (np.arange(width)[None, :] < denom[:, None])
    failures = (counted & ~passes).sum(axis=1)
    has_d = denom > 0
    fail_rate = np.divide(failures, denom, out=np.zeros(n_suites), where=has_d)
    val_raw = np.minimum(
        np.divide(n_valid, denom, out=np.zeros(n_suites), where=has_d),
        1.0 - np.divide(n_inv, denom, out=np.zeros(n_suites), where=has_d),
    )
    validity = np.where(has_d, np.clip(val_raw, 0.0, 1.0), 0.0)
    adversarial = np.select([both, has_v], [(fail_rate - f_hist[owner] + 1.0) / 2.0, fail_rate], 0.0)
    penalty = rho if nonprintable_penalty else np.zeros(n_suites)
    inner = alpha * validity + (1.0 - alpha) * adversarial
    breakdowns: list[dict[str, dict[str, float]]] = [{} for _ in suites]
    for term, weight in terms:  # a term's input is per suite: its values are gathered, then added at once
        values = np.zeros(n_suites)
        for j, s in enumerate(suites):
            values[j], breakdowns[j][term.name] = _term(term, weight, s, int(denom[j]))
        gained = s_valid * (weight * values)
        for j in range(n_suites):
            breakdowns[j][term.name]["reward"] = float(gained[j])
        inner = inner + weight * values
    reward = -penalty + s_valid * inner

    per_code_sum = np.bincount(owner, weights=r_code, minlength=n_codes)
    per_code_n = np.bincount(owner, minlength=n_codes)
    r_c = np.divide(per_code_sum, per_code_n, out=p_hist.copy(), where=per_code_n > 0)
    r_c = np.where(valid, r_c, 0.0)

    out = []
    j = 0
    for i, c in enumerate(codes):
        rows = []
        for s in c.suites:
            rows.append(
                SuiteReward(
                    reward=float(reward[j]),
                    r_code=float(r_code[j]),
                    n_valid=int(n_valid[j]),
                    passed=int(passed[j]),
                    n_invalid=int(n_inv[j]),
                    invalid_by_reason=_invalid_by_reason(s),
                    denominator=int(denom[j]),
                    failures_counted=int(failures[j]),
                    pass_rate=float(p_new[j]),
                    fail_rate=float(fail_rate[j]),
                    validity=float(validity[j]),
                    adversarial=float(adversarial[j]),
                    nonprintable_ratio=float(rho[j]),
                    terms=breakdowns[j],
                )
            )
            j += 1
        out.append(
            CodeRewards(
                reward=float(r_c[i]),
                valid=bool(valid[i]),
                history_total=int(n_hist[i]),
                history_passed=int(hist_passed[i]),
                history_pass_rate=float(p_hist[i]),
                history_fail_rate=float(f_hist[i]),
                suites=tuple(rows),
            )
        )
    return out
