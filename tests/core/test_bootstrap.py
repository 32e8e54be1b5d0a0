"""Paired bootstrap: exact edge cases, determinism, and the normal-theory width on a large sample."""

import numpy as np
import pytest

from codea1.core.bootstrap import paired_bootstrap, paired_statistic, sign_flip_p, statistic_interval


def test_identical_scores_give_a_zero_delta_and_a_point_interval() -> None:
    s = [0.0, 1.0, 0.5, 1.0]
    d = paired_bootstrap(s, s, resamples=500)
    assert (d.delta, d.ci_low, d.ci_high) == (0.0, 0.0, 0.0)
    assert d.p_not_better == 1.0  # every resample has delta <= 0
    assert (d.improved, d.worsened, d.problems) == (0, 0, 4)


def test_every_problem_fixed_is_a_certain_gain() -> None:
    d = paired_bootstrap([0, 0, 0], [1, 1, 1], resamples=200)
    assert (d.before, d.after, d.delta, d.ci_low, d.ci_high) == (0.0, 1.0, 1.0, 1.0, 1.0)
    assert d.p_not_better == 0.0 and d.improved == 3


def test_mixed_changes_hand_computed_means_and_counts() -> None:
    before = [1, 0, 0, 1, 0.5]
    after = [1, 1, 0, 0, 1.0]
    d = paired_bootstrap(before, after, resamples=2000, seed=3)
    assert d.before == pytest.approx(0.5) and d.after == pytest.approx(0.6)
    assert d.delta == pytest.approx(0.1)
    assert (d.improved, d.worsened) == (2, 1)
    assert d.ci_low < 0.0 < d.delta < d.ci_high  # one problem lost: the gain is not certain
    assert 0.0 < d.p_not_better < 1.0
    assert d == paired_bootstrap(before, after, resamples=2000, seed=3)  # deterministic per seed


def test_interval_width_matches_normal_theory_on_a_large_sample() -> None:
    rng = np.random.default_rng(0)
    before = rng.integers(0, 2, 2000).astype(float)
    after = np.where(rng.random(2000) < 0.2, 1 - before, before)  # 20 % of problems flip
    d = paired_bootstrap(before, after, resamples=4000, seed=1)
    diff = after - before
    half = 1.96 * diff.std(ddof=1) / np.sqrt(diff.size)
    assert (d.ci_high - d.ci_low) / 2 == pytest.approx(half, rel=0.1)
    assert d.ci_low < d.delta < d.ci_high


@pytest.mark.parametrize(
    ("before", "after", "kwargs", "match"),
    [
        ([], [], {}, "no problems"),
        ([1.0], [1.0, 0.0], {}, "equal-length"),
        ([float("nan")], [1.0], {}, "finite"),
        ([1.0], [1.0], {"resamples": 0}, "resamples"),
        ([1.0], [1.0], {"confidence": 1.0}, "confidence"),
    ],
)
def test_bad_inputs_are_refused_with_a_reason(before, after, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        paired_bootstrap(before, after, **kwargs)


def test_sign_flip_p_is_exact_for_few_problems_and_a_fair_estimate_for_many() -> None:
    from codea1.core.bootstrap import sign_flip_p

    assert sign_flip_p([0.5, 0.5, 0.5]) == pytest.approx(1 / 8)  # only the identity is as large
    assert sign_flip_p([0.0, 0.0]) == 1.0  # no change: every pattern ties
    assert sign_flip_p([1.0, -1.0]) == pytest.approx(3 / 4)
    mixed = [0.3, -0.1, 0.2, 0.0, 0.4, -0.2, 0.1, 0.25, 0.05, 0.15, -0.05, 0.3, 0.2, 0.1, 0.0, 0.35, 0.1, -0.1]  # fmt: skip
    exact = sign_flip_p(mixed[:16])
    assert 0.0 < exact < 0.05
    assert sign_flip_p(mixed + mixed[:6], draws=50_000) < 0.01  # 24 problems: random patterns
    with pytest.raises(ValueError):
        sign_flip_p([])


def _mean(x: np.ndarray) -> np.ndarray:
    return x[..., 0].mean(axis=-1)


@pytest.mark.parametrize("n", [7, 20])  # exact sign patterns, and random ones past EXACT_SIGN_FLIP_MAX
def test_paired_statistic_of_a_mean_is_paired_bootstrap(n: int) -> None:
    rng = np.random.default_rng(n)
    before, after = rng.random(n), rng.random(n)
    plain = paired_bootstrap(before, after, resamples=3000, seed=5)
    general = paired_statistic(before[:, None], after[:, None], _mean, resamples=3000, seed=5, draws=200_000)
    for name, value in vars(plain).items():  # the same resamples and sign patterns, up to rounding
        assert getattr(general, name) == pytest.approx(value, abs=1e-12), name


def test_two_sided_sign_flip_counts_both_tails() -> None:
    # three problems, each +1: of the 8 sign patterns only +++ has a mean >= 1, and --- as far the other way
    assert sign_flip_p([1.0, 1.0, 1.0]) == pytest.approx(1 / 8)
    assert sign_flip_p([1.0, 1.0, 1.0], two_sided=True) == pytest.approx(2 / 8)
    assert sign_flip_p([0.0, 0.0], two_sided=True) == 1.0


def test_paired_statistic_swaps_whole_rows_for_a_ratio() -> None:
    # pooled ratio sum(num) / sum(den): A 3/4 on problem 0, 0/4 on problem 1; B 1/4 and 1/4
    a = np.array([[3.0, 4.0], [0.0, 4.0]])
    b = np.array([[1.0, 4.0], [1.0, 4.0]])

    def ratio(x: np.ndarray) -> np.ndarray:
        return x[..., 0].sum(axis=-1) / x[..., 1].sum(axis=-1)

    d = paired_statistic(b, a, ratio, resamples=1000)
    assert (d.after, d.before, d.delta) == pytest.approx((3 / 8, 2 / 8, 1 / 8))
    assert (d.improved, d.worsened) == (1, 1)
    # patterns: none swapped +1/8, swap 0 -> (1+0)/8 - (1+3)/8 = -3/8, swap 1 -> 4/8 - 0/8... all four by hand
    swapped = [1 / 8, (1 + 0) / 8 - (3 + 1) / 8, (3 + 1) / 8 - (1 + 0) / 8, -1 / 8]
    assert d.p_one_sided == pytest.approx(sum(s >= 1 / 8 - 1e-12 for s in swapped) / 4)
    assert d.p_two_sided == pytest.approx(sum(abs(s) >= 1 / 8 - 1e-12 for s in swapped) / 4)


def test_statistic_interval_of_constant_rows_has_no_width() -> None:
    assert statistic_interval(np.full((5, 1), 0.25), _mean) == (0.25, 0.25)
    with pytest.raises(ValueError, match="non-empty"):
        statistic_interval(np.empty((0, 1)), _mean)
