"""The vectorised rewards equal the looped reference on random batches (every field, all switches)."""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
import pytest

from codea1.core.rewards import CodeOutcome, SuiteOutcome, rewards, rewards_reference

REASONS = ("syntax", "operator", "duplicate", "oracle_invalid", "no_entry_point")


def random_batch(rng: np.random.Generator) -> list[CodeOutcome]:
    codes = []
    for _ in range(int(rng.integers(0, 6))):
        n_hist = int(rng.choice([0, 0, 1, 3, 8]))
        suites = []
        for _ in range(int(rng.integers(0, 5))):
            n = int(rng.choice([0, 1, 3, 8, 12]))
            invalid = {r: int(rng.integers(0, 4)) for r in REASONS if rng.random() < 0.3}
            suites.append(
                SuiteOutcome(
                    tuple(bool(x) for x in rng.random(n) < 0.6),
                    int(rng.integers(0, n + 1)),
                    invalid,
                    float(rng.choice([0.0, rng.random() * 0.2])),
                )
            )
        codes.append(
            CodeOutcome(
                bool(rng.random() < 0.8), tuple(bool(x) for x in rng.random(n_hist) < 0.5), tuple(suites)
            )
        )
    return codes


def assert_same(a, b):
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, float):
            assert math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12), f.name
        elif f.name == "suites":
            assert len(x) == len(y)
            for s, t in zip(x, y, strict=True):
                assert_same(s, t)
        else:
            assert x == y, f.name


@pytest.mark.parametrize("normalize_by_suite", [False, True])
@pytest.mark.parametrize("penalty", [False, True])
@pytest.mark.parametrize("alpha", [0.5, 0.2])
def test_vectorised_equals_reference(normalize_by_suite, penalty, alpha):
    kw = dict(alpha=alpha, n_norm=8, normalize_by_suite=normalize_by_suite, nonprintable_penalty=penalty)
    for seed in range(150):
        batch = random_batch(np.random.default_rng(seed))
        ref, vec = rewards_reference(batch, **kw), rewards(batch, **kw)
        assert len(ref) == len(vec)
        for a, b in zip(ref, vec, strict=True):
            assert_same(a, b)


def test_batch_composition_does_not_change_a_code_reward():
    batch = random_batch(np.random.default_rng(7)) + random_batch(np.random.default_rng(8))
    together = rewards(batch)
    alone = [rewards([c])[0] for c in batch]
    for a, b in zip(together, alone, strict=True):
        assert_same(a, b)
