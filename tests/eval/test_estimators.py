"""Unbiased pass@k against the exact combinatorial formula; avg@k on hand-computed rows."""

from math import comb

import pytest

from codea1.core.estimators import avg_at_k, ks_for, mean_avg_at_k, mean_pass_at_k, pass_at_k


@pytest.mark.parametrize("n", [1, 2, 5, 8, 32])
def test_pass_at_k_equals_exact_binomial_formula(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            exact = 1.0 - comb(n - c, k) / comb(n, k)
            assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_hand_values():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(10, 6, 5) == 1.0  # fewer than k wrong samples: a correct one is always drawn
    assert mean_pass_at_k([8, 8, 8], [3, 0, 8], 1) == pytest.approx((3 / 8 + 0 + 1) / 3)


def test_pass_at_k_rejects_bad_arguments():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 2, 5)
    with pytest.raises(ValueError):
        pass_at_k(4, 2, 0)


def test_avg_at_k_uses_the_first_k_samples():
    row = [False, True, True, False]
    assert avg_at_k(row, 1) == 0.0
    assert avg_at_k(row, 2) == 0.5
    assert avg_at_k(row, 4) == 0.5
    assert mean_avg_at_k([row, [True] * 4], 1) == 0.5
    with pytest.raises(ValueError):
        avg_at_k(row, 5)


def test_ks_for_keeps_the_paper_ks_up_to_n():
    assert ks_for(32) == [1, 8, 16, 32]
    assert ks_for(10) == [1, 8]
    assert ks_for(1) == [1]
