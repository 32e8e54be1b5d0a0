"""``step_metrics`` reads each method family's score type by its declared fields."""

from __future__ import annotations

from collections.abc import Sequence

from codea1 import rollout as ro
from codea1.config import RewardConfig
from codea1.replay.mistake_book import StepReport
from codea1.scoring import ScoringItem, score_batch, score_golden
from codea1.trainer import step_metrics
from codea1.types import ExecGrid, GridJob, Problem

PROBLEM = Problem("p", "Return 1.", "f", "def f():\n    return 1\n", golden_tests=("assert f() == 1",))


class NoJobsExpected:
    """A grid runner for batches without any code to run: being called is a test failure."""

    def run_grids(self, jobs: Sequence[GridJob], *, rel_tol: float, abs_tol: float) -> list[ExecGrid]:
        raise AssertionError(f"no job should reach the sandbox, got {len(jobs)}")


def test_a1_step_whose_problem_has_no_code_reports_tester_series_not_golden_ones() -> None:
    rollout = ro.Rollout((ro.ProblemRollout(PROBLEM, (), ()),))
    scores = score_batch([ScoringItem(PROBLEM, (), ())], NoJobsExpected(), reward=RewardConfig())
    m = step_metrics(rollout, scores, {}, StepReport(1), book_size=0)
    assert m["tester/reward_mean"] == 0.0 and m["exec/code_valid_rate"] == 0.0
    assert m["exec/verdicts"] == 0.0 and "exec/golden_pass_rate" not in m


def test_golden_step_reports_golden_series_and_no_tester_ones() -> None:
    rollout = ro.Rollout((ro.ProblemRollout(PROBLEM, (), ()),))
    scores = score_golden([ScoringItem(PROBLEM, (), ())], NoJobsExpected())
    m = step_metrics(rollout, scores, {}, StepReport(1), None, has_tester=False)
    assert m["exec/golden_pass_rate"] == 0.0 and m["exec/code_valid_rate"] == 0.0
    assert not [k for k in m if k.startswith(("tester/", "replay/"))]
