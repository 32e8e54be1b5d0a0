"""Every derived seed pinned to its value: a run's completions, problem order and initial weights
depend on these numbers, so changing a formula (even to an equivalent-looking one) must fail here."""

from __future__ import annotations

import numpy as np
import pytest

from codea1.core.seeds import (
    batch_seed,
    call_seed,
    epoch_order,
    learner_seed,
    request_seed,
    script_rng,
)


@pytest.mark.parametrize(
    ("run_seed", "step", "role", "want"),
    [
        (0, 0, "coder", 0),
        (0, 0, "tester", 1),
        (0, 5, "coder", 10),
        (7, 3, "coder", 7_000_027),
        (7, 3, "tester", 7_000_028),
        (42, 100, "coder", 42_000_326),
    ],
)
def test_call_seeds_are_run_seed_times_1_000_003_plus_twice_the_step(run_seed, step, role, want) -> None:
    assert call_seed(run_seed, step, role) == want == run_seed * 1_000_003 + step * 2 + (role == "tester")


def test_no_two_steps_or_roles_of_a_run_share_a_call_seed() -> None:
    seeds = {call_seed(3, step, role) for step in range(1000) for role in ("coder", "tester")}
    assert len(seeds) == 2000


@pytest.mark.parametrize(
    ("seed", "prompt", "sample", "want"),
    [
        (0, 0, 0, 6436203349130839549),
        (5, 2, 1, 4669079127844594081),
        (42_000_128, 3, 7, 5029127820956583808),
        (-1, 0, 0, 5556463927361693889),
    ],
)
def test_request_seeds_are_pinned(seed, prompt, sample, want) -> None:
    assert request_seed(seed, prompt, sample) == want


def test_request_seeds_depend_on_seed_prompt_and_sample_only() -> None:
    seeds = {request_seed(s, i, j) for s in (0, 1) for i in range(3) for j in range(3)}
    assert len(seeds) == 18 and all(0 <= x < 2**63 for x in seeds)
    assert request_seed(5, 2, 1) == request_seed(5, 2, 1)


def test_batch_seeds_count_up_from_the_call_seed() -> None:
    assert [batch_seed(7_000_027, b) for b in range(3)] == [7_000_027, 7_000_028, 7_000_029]


@pytest.mark.parametrize(
    ("seed", "epoch", "want"),
    [(0, 0, [2, 4, 3, 6, 5, 0, 1, 7]), (7, 3, [3, 5, 0, 4, 2, 7, 1, 6])],
)
def test_epoch_orders_are_pinned(seed, epoch, want) -> None:
    order = epoch_order(seed, epoch, 8)
    assert order.tolist() == want
    assert order.tolist() == np.random.default_rng([seed, epoch]).permutation(8).tolist()


def test_scripted_learners_are_seeded_one_apart() -> None:
    assert (learner_seed(7, "coder"), learner_seed(7, "tester")) == (7, 8)


def test_script_generators_are_pinned() -> None:
    assert script_rng("coder", 0, 1, "p").random() == 0.5374901864616852
    assert script_rng("tester", None, 0, "q").random() == 0.521236290646497
    assert script_rng("coder", 0, 1, "p").random() != script_rng("tester", 0, 1, "p").random()
