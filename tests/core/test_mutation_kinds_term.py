"""The mutation-kinds term of R_T (deviation D13): the share of the live mutants' fault kinds of
which the suite kills at least one mutant. Exact on hand-computed suites, added the same way by both
reward implementations, beside the mutation term without changing what that one pays."""

from __future__ import annotations

import numpy as np
import pytest
from test_rewards_equivalence import random_batch

from codea1.core.reward_terms import TERMS, MutantKills, mutation_kinds_term, mutation_term
from codea1.core.rewards import CodeOutcome, SuiteOutcome, rewards, rewards_reference

# Five live mutants: three arithmetic (0, 1, 2), one comparison (3), one constant (4): three kinds.
KINDS = ("arithmetic", "arithmetic", "arithmetic", "comparison", "constant")
# One kind caught three times: 3 of 5 mutants, 1 of 3 kinds.
SAME_KIND = MutantKills(5, (frozenset({0, 1}), frozenset({2})), KINDS)
# Two kinds caught once each: 2 of 5 mutants, 2 of 3 kinds.
TWO_KINDS = MutantKills(5, (frozenset({0}), frozenset({3})), KINDS)


def test_a_suite_that_catches_several_kinds_earns_more_than_one_that_catches_one_kind_often() -> None:
    same, two = mutation_kinds_term(SAME_KIND, 8), mutation_kinds_term(TWO_KINDS, 8)
    assert same.value == pytest.approx(1 / 3) and two.value == pytest.approx(2 / 3)
    assert same.detail == {"live_kinds": 3.0, "killed_kinds": 1.0, "killed": 3.0, "same_kind_kills": 2.0}
    assert two.detail == {"live_kinds": 3.0, "killed_kinds": 2.0, "killed": 2.0, "same_kind_kills": 0.0}
    # the mutation term orders them the other way round, and the kinds do not change what it pays
    assert mutation_term(SAME_KIND, 8).value == 0.6 and mutation_term(TWO_KINDS, 8).value == 0.4
    plain = MutantKills(5, SAME_KIND.kills)
    assert mutation_term(SAME_KIND, 8) == mutation_term(plain, 8)


def test_only_the_counted_tests_kill_and_edge_cases_are_zero() -> None:
    assert mutation_kinds_term(TWO_KINDS, 1).value == pytest.approx(1 / 3)  # the comparison kill lies past D
    assert mutation_kinds_term(TWO_KINDS, 0).value == 0.0
    assert mutation_kinds_term(MutantKills(5, TWO_KINDS.kills), 8).value == 0.0  # kinds not gathered
    assert mutation_kinds_term(MutantKills(0, (frozenset(),), ()), 8).value == 0.0  # no live mutant
    everything = MutantKills(5, (frozenset(range(5)),), KINDS)
    assert mutation_kinds_term(everything, 1).value == 1.0


def test_kinds_that_do_not_match_the_live_mutants_are_refused() -> None:
    with pytest.raises(ValueError, match="2 mutant kinds for 5 live mutants"):
        MutantKills(5, (), ("arithmetic", "constant"))


def _code(valid: bool, passes: tuple[bool, ...], kills: MutantKills) -> CodeOutcome:
    terms = {"mutation": kills, "mutation_kinds": kills}
    return CodeOutcome(valid, (), (SuiteOutcome(passes, 0, {}, 0.0, terms),))


@pytest.mark.parametrize("impl", [rewards, rewards_reference])
def test_r_t_gains_the_weighted_term_for_valid_code_only(impl) -> None:
    """Weight 0.3: R_T gains 0.3 x 2/3 = 0.2 for valid code, nothing for invalid code; with both
    terms on, R_T gains both and the mutation term's part is what it is alone."""
    codes = [_code(True, (True, False), TWO_KINDS), _code(False, (True, True), TWO_KINDS)]
    base = impl(codes, n_norm=8)
    kinds = impl(codes, n_norm=8, term_weights={"mutation_kinds": 0.3})
    assert kinds[0].suites[0].reward == pytest.approx(base[0].suites[0].reward + 0.2, abs=1e-15)
    assert kinds[0].suites[0].terms["mutation_kinds"]["reward"] == pytest.approx(0.2)
    assert kinds[1].suites[0].reward == base[1].suites[0].reward
    assert "mutation" not in kinds[0].suites[0].terms
    both = impl(codes, n_norm=8, term_weights={"mutation": 0.5, "mutation_kinds": 0.3})
    alone = impl(codes, n_norm=8, term_weights={"mutation": 0.5})
    assert both[0].suites[0].terms["mutation"] == alone[0].suites[0].terms["mutation"]
    assert both[0].suites[0].reward == pytest.approx(alone[0].suites[0].reward + 0.2, abs=1e-15)


@pytest.mark.parametrize("seed", range(20))
def test_both_implementations_agree_with_the_term_on(seed: int) -> None:
    rng = np.random.default_rng(seed)
    batch = []
    for c in random_batch(rng):
        suites = []
        for s in c.suites:
            live = int(rng.integers(0, 5))
            kinds = tuple(str(k) for k in rng.choice(["arithmetic", "comparison", "constant"], live))
            kills = MutantKills(
                live,
                tuple(frozenset(int(m) for m in np.flatnonzero(rng.random(live) < 0.3)) for _ in s.passes),
                kinds,
            )
            terms = {"mutation": kills, "mutation_kinds": kills}
            suites.append(SuiteOutcome(s.passes, s.wrong_predictions, s.invalid, s.nonprintable_ratio, terms))
        batch.append(CodeOutcome(c.valid, c.history_passes, tuple(suites)))
    for weights in ({"mutation_kinds": 0.5}, {"mutation": 0.5, "mutation_kinds": 0.25}):
        vec, ref = rewards(batch, term_weights=weights), rewards_reference(batch, term_weights=weights)
        for a, b in zip(vec, ref, strict=True):
            for sa, sb in zip(a.suites, b.suites, strict=True):
                assert sa.reward == pytest.approx(sb.reward, abs=1e-12) and sa.terms == sb.terms


def test_the_terms_metrics_sum_kinds_over_suites_and_problems() -> None:
    suites = [
        {"value": 1 / 3, "reward": 0.1, "live_kinds": 3.0, "killed_kinds": 1.0, "same_kind_kills": 2.0},
        {"value": 2 / 3, "reward": 0.2, "live_kinds": 3.0, "killed_kinds": 2.0, "same_kind_kills": 0.0},
        {"value": 0.0, "reward": 0.0, "live_kinds": 0.0, "killed_kinds": 0.0, "same_kind_kills": 0.0},
    ]
    problems = [
        {"generated": 8.0, "equivalent": 2.0, "live": 5.0, "kinds": 3.0, "verdicts": 40.0},
        {"live": 0.0},
    ]
    m = TERMS["mutation_kinds"].metrics(suites, problems)
    assert m["tester/mutant_kinds_killed_rate"] == 0.5 and m["tester/mutation_kinds_score_mean"] == 0.5
    assert m["tester/mutation_kinds_reward_mean"] == pytest.approx(0.1)
    assert m["tester/mutation_same_kind_kills_mean"] == pytest.approx(2 / 3)
    assert m["tester/mutant_kinds_live_mean"] == 1.5 and m["tester/mutation_problems_off"] == 1.0
    assert m["exec/mutant_verdicts"] == 40.0 and m["tester/mutants_equivalent_rate"] == 0.25
