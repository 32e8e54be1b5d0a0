"""score_batch / score_golden against an in-process grid runner (the real sandbox is tested separately)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from scoring_fake_grid import FakeSandbox

from codea1.config import LossConfig, RewardConfig
from codea1.scoring import ScoringItem, bind_policy_loss, score_batch, score_golden
from codea1.training_mutants import MutantPool
from codea1.types import CodeExtraction, Problem, TestCase

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "score" / "worked_example.jsonl"
REF = "def absolute_sum(xs):\n    return sum(abs(x) for x in xs)\n"
GOOD = "```python\ndef absolute_sum(xs):\n    return sum(abs(x) for x in xs)\n```"
BUGGY = "```python\ndef absolute_sum(xs):\n    return sum(xs)\n```"


def problem(pid: str = "p", reference: str = REF, **kw) -> Problem:
    return Problem(id=pid, question="q", entry_point="absolute_sum", reference=reference, **kw)


def fence(*lines: str) -> str:
    return "```python\n" + "\n".join(lines) + "\n```"


def worked_item() -> ScoringItem:
    row = json.loads(FIXTURE.read_text().splitlines()[0])
    p = Problem(
        id=row["id"], question=row["question"], entry_point=row["entry_point"], reference=row["reference"]
    )
    return ScoringItem(p, tuple(row["codes"]), tuple(tuple(s) for s in row["suites"]))


def test_worked_example_numbers():
    sb = FakeSandbox()
    (s,) = score_batch([worked_item()], sb, reward=RewardConfig())
    assert len(sb.calls) == 1 and len(sb.calls[0]) == 1
    assert s.error == ""
    assert s.code_rewards == pytest.approx((1.0, 1 / 6))
    assert s.suite_rewards[0] == pytest.approx((0.25, 0.0625))
    assert s.suite_rewards[1] == pytest.approx((0.3125, -1 / 9))
    b = s.breakdowns[0].suites[1]
    assert b.invalid_by_reason == {"duplicate": 1, "no_entry_point": 1, "oracle_invalid": 1}
    assert s.breakdowns[0].suites[0].invalid_by_reason == {"wrong_prediction": 1}
    failed = {h.test.call: h.count for h in s.mistakes.failed}
    assert failed == {"absolute_sum([-3, 1])": 1, "absolute_sum([-1])": 1}
    assert s.mistakes.passed == ()
    assert json.loads(json.dumps(s.to_dict()))["suite_rewards"][1][0] == pytest.approx(0.3125)


def test_worked_example_with_history():
    history = {
        "worked/absolute_sum": [TestCase("absolute_sum([-3, 1])", "4"), TestCase("absolute_sum([-1])", "1")]
    }
    (s,) = score_batch([worked_item()], FakeSandbox(), reward=RewardConfig(), history=history)
    assert s.code_rewards == pytest.approx((1.0, 1 / 12))
    assert s.suite_rewards[0] == pytest.approx((0.5, 0.3125))
    assert s.suite_rewards[1] == pytest.approx((0.25, -1 / 9))
    # the history test equal to a generated one shares its grid column
    assert len(s.tests) == 8 and s.history_columns == (5, 7)
    passed = {h.test.call: h.count for h in s.mistakes.passed}
    assert passed == {"absolute_sum([-3, 1])": 1, "absolute_sum([-1])": 1}


def test_unextractable_code_is_invalid_and_not_run():
    item = ScoringItem(
        problem(),
        ("no code here", GOOD),
        ((fence("assert absolute_sum([1]) == 1"),), (fence("assert absolute_sum([-2]) == 2"),)),
    )
    sb = FakeSandbox()
    (s,) = score_batch([item], sb, reward=RewardConfig())
    assert len(sb.calls[0][0].codes) == 1
    assert s.code_rewards == pytest.approx((0.0, 1.0))
    assert s.breakdowns[0].valid is False and s.suite_rewards[0] == (0.0,)
    assert s.to_dict()["breakdown"]["codes"][0]["extraction"] != "ok"


def test_imports_are_prepended_to_each_code():
    p = problem(imports="import math")
    code = "```python\ndef absolute_sum(xs):\n    return int(math.fsum(abs(x) for x in xs))\n```"
    sb = FakeSandbox()
    (s,) = score_batch(
        [ScoringItem(p, (code,), ((fence("assert absolute_sum([-2, 1]) == 3"),),))], sb, reward=RewardConfig()
    )
    assert sb.calls[0][0].codes[0].startswith("import math\n")
    assert s.code_rewards == (1.0,)


def test_one_bad_problem_does_not_zero_the_batch():
    good = ScoringItem(problem("ok"), (BUGGY,), ((fence("assert absolute_sum([-1]) == 1"),),))
    bad = ScoringItem(problem("boom"), (GOOD,), ((fence("assert absolute_sum([1]) == 1"),),))
    sb = FakeSandbox(fail_ids=["boom"])
    s_ok, s_bad = score_batch([good, bad], sb, reward=RewardConfig())
    assert s_ok.error == "" and s_ok.code_rewards == (0.0,) and s_ok.suite_rewards[0][0] > 0
    assert s_bad.error.startswith("sandbox: RuntimeError") and s_bad.code_rewards == (0.0,)
    assert s_bad.suite_rewards == ((0.0,),) and s_bad.mistakes.failed == ()
    assert [len(c) for c in sb.calls] == [2, 1, 1]


def test_malformed_problems_get_a_reason():
    mismatched = ScoringItem(problem("m"), (GOOD, GOOD), ((fence("assert absolute_sum([1]) == 1"),),))
    no_ref = ScoringItem(problem("r", reference="  "), (GOOD,), (("",),))
    s1, s2 = score_batch([mismatched, no_ref], FakeSandbox(), reward=RewardConfig())
    assert "suite lists" in s1.error and s1.code_rewards == (0.0, 0.0)
    assert s2.error == "empty reference solution"


class ShapeBreaker(FakeSandbox):
    def run_grids(self, jobs, *, rel_tol, abs_tol):
        grids = super().run_grids(jobs, rel_tol=rel_tol, abs_tol=abs_tol)
        g = grids[0]
        return [type(g)(g.id, g.oracle[:-1], g.code_status, g.verdicts)]


def test_grid_with_wrong_shape_is_an_error_not_a_crash():
    item = ScoringItem(
        problem(), (GOOD,), ((fence("assert absolute_sum([1]) == 1", "assert absolute_sum([2]) == 2"),),)
    )
    (s,) = score_batch([item], ShapeBreaker(), reward=RewardConfig())
    assert "shape" in s.error and s.code_rewards == (0.0,)


def test_eleven_tests_failure_of_test_one_stays_a_failure():
    # Reference bug R7 (docs/algorithm.md):
    # with ≥ 11 tests, a failed first test is not turned into a pass by test 10's result.
    lines = ["assert absolute_sum([-1]) == 1"] + [f"assert absolute_sum([{i}]) == {i}" for i in range(1, 11)]
    (s,) = score_batch(
        [ScoringItem(problem(), (BUGGY,), ((fence(*lines),),))], FakeSandbox(), reward=RewardConfig()
    )
    sb = s.breakdowns[0].suites[0]
    assert (sb.n_valid, sb.passed, sb.failures_counted) == (11, 10, 1)


def test_tautologies_earn_no_validity():
    suite = fence(*[f"assert len([{i}]) == 1" for i in range(8)])
    (s,) = score_batch([ScoringItem(problem(), (GOOD,), ((suite,),))], FakeSandbox(), reward=RewardConfig())
    assert s.breakdowns[0].suites[0].validity == 0.0 and s.suite_rewards[0][0] == 0.0
    assert s.breakdowns[0].suites[0].invalid_by_reason == {"no_entry_point": 8}


def test_mistake_counts_follow_own_suites_and_keep_wrong_predictions():
    # Both buggy codes carry the same failing test: counted twice. A third code's test that
    # only the others would fail is not counted against them (codes are judged on their own suites).
    t = fence("assert absolute_sum([-4]) == 3")  # wrong prediction (oracle 4), still usable
    other = fence("assert absolute_sum([-9]) == 9")
    item = ScoringItem(problem(), (BUGGY, BUGGY, GOOD), ((t,), (t,), (other,)))
    (s,) = score_batch([item], FakeSandbox(), reward=RewardConfig())
    (hit,) = s.mistakes.failed
    assert (
        hit.test == TestCase("absolute_sum([-4])", "3")
        and hit.count == 2
        and hit.oracle_status == "wrong_prediction"
    )


def test_golden_tests_baseline():
    p = problem(
        golden_tests=(
            "assert absolute_sum([1, -1]) == 2",
            "assert absolute_sum([]) == 0",
            "assert absolute_sum([-3]) == 3",
        )
    )
    items = [ScoringItem(p, (GOOD, BUGGY, "nothing"), ((), (), ()))]
    (g,) = score_golden(items, FakeSandbox())
    assert g.total == 3 and g.error == ""
    assert g.code_rewards == pytest.approx((1.0, 1 / 3, 0.0))
    assert g.code_valid == (True, True, False)
    assert json.loads(json.dumps(g.to_dict()))["passed"] == [3, 1, 0]
    (none,) = score_golden([ScoringItem(problem(), (GOOD,), ((),))], FakeSandbox())
    assert none.error and none.code_rewards == (0.0,)


def test_bind_policy_loss_carries_the_config():
    fn = bind_policy_loss(LossConfig(clip_low=0.1, kl_coef=0.0))
    assert fn.keywords["clip_low"] == 0.1 and fn.keywords["kl_coef"] == 0.0


def test_given_code_extractions_are_used_not_extracted_again():
    from codea1.data.parsing import extract_code

    suite = fence("assert absolute_sum([-2, 1]) == 3")
    texts = (GOOD, BUGGY)
    extracted = tuple(extract_code(t, "absolute_sum") for t in texts)
    given = ScoringItem(problem(), texts, ((suite,), (suite,)), extracted)
    plain = score_batch([replace(given, code_extractions=None)], FakeSandbox(), reward=RewardConfig())
    assert score_batch([given], FakeSandbox(), reward=RewardConfig()) == plain
    swapped = ScoringItem(problem(), texts, ((suite,), (suite,)), extracted[::-1])  # what scoring runs
    (s,) = score_batch([swapped], FakeSandbox(), reward=RewardConfig())
    assert s.code_rewards == plain[0].code_rewards[::-1] and s.code_extractions == extracted[::-1]
    golden = replace(given, suite_texts=((), ()))
    golden_p = replace(golden, problem=problem(golden_tests=("assert absolute_sum([-1]) == 1",)))
    (g,) = score_golden([golden_p], FakeSandbox())
    assert g.code_rewards == (1.0, 0.0)
    with pytest.raises(ValueError, match="1 code extractions for 2 code texts"):
        given_short = ScoringItem(problem(), texts, ((suite,), (suite,)), extracted[:1])
        score_batch([given_short], FakeSandbox(), reward=RewardConfig())


def test_a_rollouts_scoring_items_carry_the_code_it_extracted():
    from codea1 import rollout as ro
    from codea1.engine.base import Completion

    def comp(text: str) -> Completion:
        return Completion(0, text, (1,), tuple(text.encode()), ())

    codes = tuple(ro.CodeSample(comp(t), CodeExtraction(f"# code {i}")) for i, t in enumerate((GOOD, BUGGY)))
    suites = ((comp("s1"), comp("s2")), ())
    (item,) = ro.scoring_items(ro.Rollout((ro.ProblemRollout(problem(), codes, suites),)))
    assert item.code_texts == (GOOD, BUGGY) and item.suite_texts == (("s1", "s2"), ())
    assert item.code_extractions == (CodeExtraction("# code 0"), CodeExtraction("# code 1"))


def test_training_and_golden_jobs_carry_the_questions_names_and_helpers():
    """Both scorers build the problem's job with ``problem_job``: the names a test may use and the
    question's helpers as trusted source (the golden scorer used to pass neither)."""
    question = 'import math\n\ndef clip(x):\n    return max(x, 0)\n\ndef absolute_sum(xs):\n    """Sum."""\n'
    p = replace(problem(golden_tests=("assert absolute_sum([-2, 1]) == 3",)), question=question)
    sb = FakeSandbox()
    score_batch(
        [ScoringItem(p, (GOOD,), ((fence("assert absolute_sum([1]) == 1"),),))], sb, reward=RewardConfig()
    )
    score_golden([ScoringItem(p, (GOOD,), ((),))], sb)
    for (job,) in sb.calls:
        assert job.question_names == {"math", "clip", "absolute_sum"}
        assert job.question_helpers == "import math\n\ndef clip(x):\n    return max(x, 0)\n"


def test_the_training_mutant_filter_jobs_carry_the_questions_helpers():
    """The filter's jobs judge the mutants with the helpers of the scoring grid they become rows of;
    no names check there (every code and reference is the reference or one of its mutants)."""
    question = 'def clip(x):\n    return max(x, 0)\n\ndef absolute_sum(xs):\n    """Sum."""\n'
    p = replace(problem(golden_tests=("assert absolute_sum([-2, 1]) == 3",)), question=question)
    sb = FakeSandbox()
    MutantPool(4, 0).live([p], sb, rel_tol=1e-6, abs_tol=1e-6)
    jobs = [job for call in sb.calls for job in call]
    assert len(jobs) > 1
    assert all(j.question_helpers == "def clip(x):\n    return max(x, 0)\n" for j in jobs)
    assert all(j.question_names is None for j in jobs)
