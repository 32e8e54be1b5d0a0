"""Hand-computed rewards for every branch of docs/algorithm.md items 9–10 (α = 0.5, N = 8 unless
stated)."""

from __future__ import annotations

import pytest

from codea1.core.rewards import CodeOutcome, SuiteOutcome, rewards, rewards_reference

IMPLS = [rewards_reference, rewards]
T, F = True, False


def one(code: CodeOutcome, impl, **kw):
    return impl([code], **kw)[0]


@pytest.mark.parametrize("impl", IMPLS)
def test_no_history_one_suite(impl):
    # 4 valid tests, 3 passed: P = 3/4; Val = min(4/8, 1) = 0.5; F = 1/8; R_T = .5*.5 + .5*.125
    r = one(CodeOutcome(True, (), (SuiteOutcome((T, T, F, T)),)), impl)
    assert r.reward == pytest.approx(0.75)
    s = r.suites[0]
    assert (s.validity, s.fail_rate, s.adversarial) == pytest.approx((0.5, 0.125, 0.125))
    assert s.reward == pytest.approx(0.3125)
    assert (s.n_valid, s.passed, s.failures_counted, s.denominator) == (4, 3, 1, 8)


@pytest.mark.parametrize("impl", IMPLS)
def test_with_history(impl):
    # P_H = 1/4, F_H = 3/4; suite 8 valid, 6 passed: r_C = ½(¼ + ¾) = ½; Adv = (¼ − ¾ + 1)/2 = ¼
    r = one(CodeOutcome(True, (T, F, F, F), (SuiteOutcome((T,) * 6 + (F, F)),)), impl)
    assert (r.history_pass_rate, r.history_fail_rate) == pytest.approx((0.25, 0.75))
    assert r.reward == pytest.approx(0.5)
    assert r.suites[0].validity == pytest.approx(1.0)
    assert r.suites[0].adversarial == pytest.approx(0.25)
    assert r.suites[0].reward == pytest.approx(0.625)


@pytest.mark.parametrize("impl", IMPLS)
def test_history_and_empty_suite(impl):
    # Suite 2 has no valid test: r_C = P_H = ¼, Adv = 0, Val = clip(min(0, 1 − 2/8)) = 0.
    suites = (SuiteOutcome((T,) * 6 + (F, F)), SuiteOutcome((), invalid={"syntax": 2}))
    r = one(CodeOutcome(True, (T, F, F, F), suites), impl)
    assert r.suites[1].r_code == pytest.approx(0.25)
    assert r.suites[1].reward == pytest.approx(0.0)
    assert r.reward == pytest.approx((0.5 + 0.25) / 2)
    assert r.suites[1].invalid_by_reason == {"syntax": 2}


@pytest.mark.parametrize("impl", IMPLS)
def test_nothing_available(impl):
    r = one(CodeOutcome(True, (), (SuiteOutcome((), nonprintable_ratio=0.1),)), impl)
    assert r.reward == 0.0
    assert r.suites[0].reward == pytest.approx(-0.1)
    assert (
        one(
            CodeOutcome(True, (), (SuiteOutcome((), nonprintable_ratio=0.1),)),
            impl,
            nonprintable_penalty=False,
        )
        .suites[0]
        .reward
        == 0.0
    )


@pytest.mark.parametrize("impl", IMPLS)
def test_invalid_code(impl):
    # valid(c) = 0: R_C = 0 and R_T = −ρ, whatever the (stale) pass flags say.
    r = one(CodeOutcome(False, (T, T), (SuiteOutcome((T, T, T), nonprintable_ratio=0.05),)), impl)
    assert r.reward == 0.0
    assert r.history_passed == 0 and r.suites[0].passed == 0
    assert r.suites[0].reward == pytest.approx(-0.05)


@pytest.mark.parametrize("impl", IMPLS)
def test_duplicates_and_wrong_predictions(impl):
    # |V| = 6 (2 with a wrong prediction), 1 duplicate, 1 oracle-invalid: inv = 4
    # Val = min(6/8, 1 − 4/8) = 0.5; 4/6 passed: F = 2/8; R_T = .25 + .125; R_C = 2/3
    s = SuiteOutcome((T, T, F, T, F, T), wrong_predictions=2, invalid={"duplicate": 1, "oracle_invalid": 1})
    r = one(CodeOutcome(True, (), (s,)), impl)
    assert r.suites[0].n_invalid == 4
    assert r.suites[0].invalid_by_reason == {"duplicate": 1, "oracle_invalid": 1, "wrong_prediction": 2}
    assert r.suites[0].validity == pytest.approx(0.5)
    assert r.suites[0].reward == pytest.approx(0.375)
    assert r.reward == pytest.approx(2 / 3)


@pytest.mark.parametrize("impl", IMPLS)
def test_only_first_n_count_for_adv_but_all_for_pass(impl):
    # 10 valid tests: failures at 1, 9, 10. F counts test 1 only (1/8); P = 7/10; Val capped at 1.
    passes = (F,) + (T,) * 7 + (F, F)
    r = one(CodeOutcome(True, (), (SuiteOutcome(passes),)), impl)
    assert r.suites[0].failures_counted == 1
    assert r.suites[0].validity == pytest.approx(1.0)
    assert r.suites[0].reward == pytest.approx(0.5 + 0.0625)
    assert r.reward == pytest.approx(0.7)


@pytest.mark.parametrize("impl", IMPLS)
def test_validity_clipped_at_zero(impl):
    r = one(CodeOutcome(True, (), (SuiteOutcome((T, T, T), invalid={"operator": 10}),)), impl)
    assert r.suites[0].validity == 0.0
    assert r.suites[0].reward == pytest.approx(0.0)  # Adv = 0/8 failures


@pytest.mark.parametrize("impl", IMPLS)
def test_tautologies_earn_no_validity(impl):
    # `assert len([1]) == 1` is rejected as no_entry_point: eight of them give Val = 0 and R_T = 0.
    r = one(CodeOutcome(True, (), (SuiteOutcome((), invalid={"no_entry_point": 8}),)), impl)
    assert r.suites[0].validity == 0.0 and r.suites[0].reward == 0.0


@pytest.mark.parametrize("impl", IMPLS)
def test_normalize_by_suite_matches_paper_figure(impl):
    # detailed_pipeline.png: 3 tests, F_H = 0.5; 1 or 2 failures give Adv 0.417 / 0.583.
    hist = (T, F)
    for fails, adv in ((1, 0.4166667), (2, 0.5833333)):
        passes = (F,) * fails + (T,) * (3 - fails)
        r = one(CodeOutcome(True, hist, (SuiteOutcome(passes),)), impl, normalize_by_suite=True)
        assert r.suites[0].denominator == 3
        assert r.suites[0].validity == pytest.approx(1.0)
        assert r.suites[0].adversarial == pytest.approx(adv, abs=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
def test_alpha_weights(impl):
    s = SuiteOutcome((T, F, F, F))  # Val = 0.5, F = 3/8
    assert one(CodeOutcome(True, (), (s,)), impl, alpha=1.0).suites[0].reward == pytest.approx(0.5)
    assert one(CodeOutcome(True, (), (s,)), impl, alpha=0.0).suites[0].reward == pytest.approx(0.375)


@pytest.mark.parametrize("impl", IMPLS)
def test_no_suites_falls_back_to_history(impl):
    assert one(CodeOutcome(True, (T, F), ()), impl).reward == pytest.approx(0.5)


def test_rewards_are_not_rounded_to_bf16():
    # Reference bug R9 (docs/algorithm.md):
    # 999/1000 and 1000/1000 differ by 1e-3, invisible in bf16 (8 bits of mantissa).
    a = rewards([CodeOutcome(True, (), (SuiteOutcome((T,) * 999 + (F,)),))])[0].reward
    b = rewards([CodeOutcome(True, (), (SuiteOutcome((T,) * 1000),))])[0].reward
    assert a == 0.999 and b == 1.0 and isinstance(a, float)


def test_bad_arguments():
    with pytest.raises(ValueError):
        rewards([], alpha=1.5)
    with pytest.raises(ValueError):
        rewards_reference([], n_norm=0)


def test_breakdown_to_dict_roundtrips_to_json():
    import json

    r = rewards([CodeOutcome(True, (T,), (SuiteOutcome((T, F), 1, {"syntax": 1}, 0.02),))])[0]
    d = json.loads(json.dumps(r.to_dict()))
    assert d["suites"][0]["invalid_by_reason"] == {"syntax": 1, "wrong_prediction": 1}
    assert d["history_total"] == 1 and d["reward"] == r.reward
