"""Top-spread selection of Test-LLM groups (docs/algorithm.md item 16)."""

from __future__ import annotations

import numpy as np
import pytest

from codea1.core.selection import group_spread, select_groups, select_groups_batch


def test_largest_population_std_wins():
    r = [[0.5, 0.5, 0.5, 0.5], [0.0, 1.0, 0.0, 1.0], [0.2, 0.4, 0.2, 0.4]]
    assert group_spread(r) == pytest.approx([0.0, 0.5, 0.1])  # population std (ddof 0)
    assert select_groups(r, 1) == [1]
    assert select_groups(r, 2) == [1, 2]


def test_ties_go_to_lowest_index_even_with_float_residue():
    # seven times 0.7 has a numpy std of ~1e-16, seven times 0.3 exactly 0: both must tie at zero.
    r = np.array([[0.3] * 7, [0.7] * 7, [0.1] * 7])
    assert np.std(r[1]) > 0.0 and np.std(r[0]) == 0.0  # the residue this guards against
    assert select_groups(r, 1) == [0]
    assert select_groups(r, 2) == [0, 1]
    r2 = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    assert select_groups(r2, 1) == [0]


def test_keep_all_and_bounds():
    r = np.random.default_rng(0).random((5, 8))
    assert select_groups(r, 0) == [0, 1, 2, 3, 4]
    assert sorted(select_groups(r, 99)) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        select_groups(r, -1)
    with pytest.raises(ValueError):
        select_groups([1.0, 2.0], 1)


def test_batch_with_ragged_code_counts():
    out = select_groups_batch([[[0, 1], [0, 0]], [[1, 1], [0, 1], [1, 0]]], 1)
    assert out == [[0], [1]]
    assert select_groups_batch([[]], 1) == [[]]
