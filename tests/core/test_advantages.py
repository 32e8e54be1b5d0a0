"""GRPO group normalisation (docs/algorithm.md item 17)."""

from __future__ import annotations

import math

import pytest
import torch

from codea1.core.advantages import group_advantages
from codea1.engine.base import Completion
from codea1.rollout import ScoredSample, training_batch


def test_hand_computed_group():
    # rewards 0, 1, 2 in one group: mean 1, unbiased std 1 → A = (−1, 0, 1)/(1 + eps)
    adv, stats = group_advantages([0.0, 1.0, 2.0], ["g", "g", "g"], eps=0.0)
    assert adv.dtype == torch.float32
    assert adv.tolist() == pytest.approx([-1.0, 0.0, 1.0])
    assert stats.n_groups == 1 and stats.n_zero_variance_groups == 0


def test_unbiased_std_as_in_verl():
    r = torch.tensor([0.0, 1.0])
    adv, _ = group_advantages(r, [0, 0], eps=1e-6)
    expected = 0.5 / (math.sqrt(0.5) + 1e-6)  # torch.std([0, 1]) = sqrt(0.5)
    assert adv.tolist() == pytest.approx([-expected, expected])


def test_no_std_option_only_centres():
    adv, _ = group_advantages([0.0, 1.0, 5.0], [1, 1, 1], norm_by_std=False)
    assert adv.tolist() == pytest.approx([-2.0, -1.0, 3.0])


def test_zero_variance_and_singletons_are_zero_and_counted():
    r = [0.1] * 8 + [0.7] * 3 + [0.9] + [0.0, 1.0]
    g = ["a"] * 8 + ["b"] * 3 + ["c"] + ["d", "d"]
    adv, stats = group_advantages(r, g)
    assert adv[:12].abs().max().item() == 0.0  # exactly zero, not residue / eps
    assert adv[12].item() < 0 < adv[13].item()
    assert (stats.n_groups, stats.n_zero_variance_groups, stats.n_singleton_groups) == (4, 2, 1)


def test_groups_do_not_interact_and_ids_may_interleave():
    adv, _ = group_advantages([0.0, 10.0, 1.0, 20.0], ["x", "y", "x", "y"])
    alone_x, _ = group_advantages([0.0, 1.0], ["x", "x"])
    assert adv[[0, 2]].tolist() == pytest.approx(alone_x.tolist())
    assert adv[[1, 3]].tolist() == pytest.approx(alone_x.tolist(), rel=1e-5)  # scale-free up to eps
    ids = torch.tensor([3, 3, 5, 5])
    adv2, stats = group_advantages([0.0, 1.0, 0.0, 1.0], ids)
    assert stats.n_groups == 2 and adv2.tolist() == pytest.approx(2 * alone_x.tolist())


def test_empty_and_mismatched():
    adv, stats = group_advantages([], [])
    assert adv.numel() == 0 and stats.n_groups == 0
    with pytest.raises(ValueError):
        group_advantages([1.0, 2.0], ["a"])


def test_rewards_a_thousandth_apart_get_distinct_advantages():
    # Reference bug R9 (docs/algorithm.md):
    # rewards were stored in bf16 before the GRPO normalisation; 0.999 and 1.0
    # both round to 1.0 there, so this group looked flat and carried no signal.
    rewards = [0.999, 1.0, 0.999, 1.0]
    adv, stats = group_advantages(rewards, ["g"] * 4)
    assert stats.n_zero_variance_groups == 0
    expected = 0.0005 / (math.sqrt(4 * 0.0005**2 / 3) + 1e-6)
    assert adv.tolist() == pytest.approx([-expected, expected, -expected, expected], rel=1e-4)
    samples = [
        ScoredSample(Completion(0, "t", (1,), (2, 3), (-0.5, -0.5)), r, ("coder", 0), (0, i, -1))
        for i, r in enumerate(rewards)
    ]
    batch, batch_stats = training_batch(samples)
    assert batch.train.advantages == pytest.approx(adv.tolist())
    assert batch.rewards == rewards and batch_stats.n_zero_variance_groups == 0
