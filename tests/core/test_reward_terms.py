"""The mutation term of R_T (deviation D12): exact on hand-computed kills, added the same way by both
reward implementations, and nothing at all with its weight at 0 (the paper's rewards bit for bit)."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest
from test_rewards_equivalence import random_batch

from codea1.config import RewardConfig
from codea1.core.reward_terms import (
    MutantKills,
    active_terms,
    mutation_credits,
    mutation_term,
    reward_options,
    term_weights,
)
from codea1.core.rewards import CodeOutcome, SuiteOutcome, rewards, rewards_reference

# Four live mutants (0..3). In suite order: t1 kills 0 and 1; t2 kills 1 only (nothing new: a
# redundant test); t3 kills 1 and 2 (2 is new, 1 a redundant kill); t4 kills 3 but lies past the
# counted tests. Killed among the counted: {0, 1, 2} = 3 of 4.
KILLS = MutantKills(4, (frozenset({0, 1}), frozenset({1}), frozenset({1, 2}), frozenset({3})))


def test_mutation_term_is_exact_on_a_hand_computed_suite() -> None:
    tv = mutation_term(KILLS, counted=3)
    assert tv.value == 0.75
    assert tv.detail == {"live": 4.0, "killed": 3.0, "redundant_kills": 2.0, "redundant_tests": 1.0}
    assert mutation_credits(KILLS, 3) == (0.5, 0.0, 0.25)  # t2 earns nothing: the redundancy penalty
    assert mutation_term(KILLS, counted=4).value == 1.0  # t4 counted: mutant 3 killed too
    assert mutation_term(KILLS, counted=0).value == 0.0
    assert mutation_term(MutantKills(0, (frozenset(),)), counted=1).value == 0.0  # no live mutant


@pytest.mark.parametrize("counted", [0, 1, 2, 3, 4, 9])
def test_the_credits_of_each_test_sum_to_the_term(counted: int) -> None:
    assert sum(mutation_credits(KILLS, counted)) == pytest.approx(mutation_term(KILLS, counted).value)


def _code(valid: bool, passes: tuple[bool, ...], kills: MutantKills | None) -> CodeOutcome:
    terms = {} if kills is None else {"mutation": kills}
    return CodeOutcome(valid, (), (SuiteOutcome(passes, 0, {}, 0.0, terms),))


@pytest.mark.parametrize("impl", [rewards, rewards_reference])
def test_r_t_gains_the_weighted_term_for_valid_code_only(impl) -> None:
    """Weight 0.4, n_norm 3 (the term counts the same first three tests Adv counts): R_T gains
    0.4 x 0.75 = 0.3 for valid code, nothing for invalid code (valid(c) gates R_T as in the paper)."""
    codes = [_code(True, (True, False, True, False), KILLS), _code(False, (True, True, True, True), KILLS)]
    base = impl(codes, alpha=0.5, n_norm=3)
    with_term = impl(codes, alpha=0.5, n_norm=3, term_weights={"mutation": 0.4})
    valid, invalid = with_term[0].suites[0], with_term[1].suites[0]
    assert valid.reward == pytest.approx(base[0].suites[0].reward + 0.3, abs=1e-15)
    assert valid.terms["mutation"] == {
        "value": 0.75, "weight": 0.4, "reward": pytest.approx(0.3), "live": 4.0, "killed": 3.0,
        "redundant_kills": 2.0, "redundant_tests": 1.0,
    }  # fmt: skip
    assert invalid.reward == base[1].suites[0].reward and invalid.terms["mutation"]["reward"] == 0.0
    assert [c.reward for c in with_term] == [c.reward for c in base]  # R_C untouched


def test_a_suite_without_the_terms_input_gets_zero_from_it() -> None:
    (code,) = rewards([_code(True, (True,), None)], term_weights={"mutation": 1.0})
    assert code.suites[0].terms["mutation"]["value"] == 0.0
    assert code.suites[0].reward == rewards([_code(True, (True,), None)])[0].suites[0].reward


@pytest.mark.parametrize("seed", range(20))
def test_weight_zero_is_the_papers_rewards_bit_for_bit(seed: int) -> None:
    """With the weight at 0 (the default) every field of every reward equals the paper's rewards
    computed without any term, even where suites carry the term's input, and the output has no
    ``terms`` key; with a weight, both implementations still agree."""
    rng = np.random.default_rng(seed)
    plain = random_batch(rng)
    with_kills = [
        CodeOutcome(c.valid, c.history_passes, tuple(
            SuiteOutcome(s.passes, s.wrong_predictions, s.invalid, s.nonprintable_ratio,
                         {"mutation": MutantKills(3, tuple(frozenset({i % 3}) for i in range(len(s.passes))))})
            for s in c.suites))
        for c in plain
    ]  # fmt: skip
    for kw in ({"alpha": 0.5}, {"alpha": 0.25, "normalize_by_suite": True}):
        paper = [asdict(c) for c in rewards(plain, **kw)]
        assert [asdict(c) for c in rewards(with_kills, **kw, term_weights={"mutation": 0.0})] == paper
        assert [asdict(c) for c in rewards_reference(with_kills, **kw, term_weights={})] == paper
        on_vec = rewards(with_kills, **kw, term_weights={"mutation": 0.7})
        on_ref = rewards_reference(with_kills, **kw, term_weights={"mutation": 0.7})
        for a, b in zip(on_vec, on_ref, strict=True):
            for sa, sb in zip(a.suites, b.suites, strict=True):
                assert sa.reward == pytest.approx(sb.reward, abs=1e-12) and sa.terms == sb.terms
    for c in rewards(plain):
        for s in c.suites:
            assert "terms" not in s.to_dict()


def test_the_default_reward_section_turns_no_term_on() -> None:
    assert term_weights(RewardConfig()) == {"mutation": 0.0, "mutation_kinds": 0.0}
    assert active_terms(reward_options(RewardConfig())["term_weights"]) == []
    assert [t.name for t, _ in active_terms({"mutation": 0.5})] == ["mutation"]


@pytest.mark.parametrize(
    "weights, message",
    [({"nosuch": 1.0}, "unknown reward term 'nosuch'"), ({"mutation": -1.0}, "finite number >= 0"),
     ({"mutation": float("nan")}, "finite number >= 0"), ({"mutation": float("inf")}, "finite number >= 0")],
)  # fmt: skip
def test_bad_weights_are_refused_by_name(weights: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rewards([], term_weights=weights)
