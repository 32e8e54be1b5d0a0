"""The question's names and helpers in evaluation's grid jobs (``test_names.problem_job``): ``eval
tests`` (one suite) refuses a test that uses a name only the reference defines and calls the
question's helper, not a candidate's; ULT's protocol takes the helpers but not the names check (its
codes are the reference and its mutants, which define every name the reference does)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from codea1.config import SandboxConfig
from codea1.eval.suite_eval import evaluate_suites, suite_from_lines
from codea1.eval.ult_eval import evaluate_iterative
from codea1.sandbox.tasks import ExprOutcome, ProgramOutcome, ProgramTask
from codea1.sandbox.test_names import helper_source, question_names
from codea1.types import ExecGrid, GridJob, OracleVerdict, Problem, Verdict

pytest.importorskip("codea1.sandbox.local", reason="sandbox module not importable")
from codea1.sandbox.local import Sandbox  # noqa: E402

QUESTION = 'def double(x):\n    return 2 * x\n\n\ndef f(x):\n    """x + 1."""\n'
REFERENCE = "def double(x):\n    return 2 * x\n\n\ndef _tail(x):\n    return x + 1\n\n\ndef f(x):\n    return _tail(x)\n"
PROBLEM = Problem(id="p/1", question=QUESTION, entry_point="f", reference=REFERENCE, source="p")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(SandboxConfig(workers=1)) as sb:
        yield sb


def test_eval_tests_refuses_reference_only_names_and_calls_the_questions_helper(sandbox: Sandbox) -> None:
    """A wrong sample that redefines the question's ``double`` is caught by ``double(f(1)) == 4``
    (it used to pass with its own ``double``); ``f(_tail(1))`` uses the reference's own helper and
    is invalid (it used to count as valid and catch every sample without ``_tail``)."""
    suite = suite_from_lines(["assert double(f(1)) == 4", "assert f(_tail(1)) == 3"], "f")
    assert len(suite.tests) == 2
    wrong = "def double(x):\n    return 4\n\n\ndef f(x):\n    return x\n"
    (rec,) = evaluate_suites(
        [PROBLEM],
        {PROBLEM.id: suite},
        sandbox,
        {PROBLEM.id: 1.0},
        k=2,
        max_mutants=0,
        wrong_codes={PROBLEM.id: [wrong]},
    )
    assert rec["oracle"] == ["valid", "invalid"]
    assert (rec["wrong_codes"], rec["detected"]) == (1, 1)


class RecordingFakeRunner:
    """A fake sandbox (unit test only): records the grid jobs it gets, answers every test as valid
    and passed, and every coverage expression with no arcs."""

    def __init__(self) -> None:
        self.config = SandboxConfig()
        self.jobs: list[GridJob] = []

    def run_grids(self, jobs: Sequence[GridJob]) -> list[ExecGrid]:
        self.jobs.extend(jobs)
        return [
            ExecGrid(j.id, tuple(OracleVerdict("valid") for _ in j.tests), tuple(Verdict("pass") for _ in j.codes),
                     tuple(tuple(Verdict("pass") for _ in j.tests) for _ in j.codes))
            for j in jobs
        ]  # fmt: skip

    def run_tasks(self, tasks: Sequence[ProgramTask]) -> list[ProgramOutcome]:
        return [
            ProgramOutcome("pass", "", tuple(ExprOutcome("value", value=[]) for _ in t.exprs)) for t in tasks
        ]

    def run_checks(self, jobs: Sequence[object]) -> list[Verdict]:
        return [Verdict("pass") for _ in jobs]


def test_ult_jobs_carry_the_questions_helpers_without_the_names_check() -> None:
    runner = RecordingFakeRunner()
    suite = suite_from_lines(["assert f(1) == 2"], "f")
    evaluate_iterative([PROBLEM], {PROBLEM.id: suite}, runner, k=1, max_mutants=0, mutant_source="ast")
    (job,) = runner.jobs
    assert job.question_helpers == helper_source(PROBLEM) == "def double(x):\n    return 2 * x\n"
    assert job.question_names is None and question_names(PROBLEM) == {"double", "f"}
