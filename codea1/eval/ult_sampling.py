"""UnLeakedTestBench's K-query task: the suites a Test LLM writes one test at a time.

Round 1 shows the function under test and asks for one test; round i (2 ≤ i ≤ K) shows the
function and the tests of the earlier rounds and asks for one new, different test
(``data.prompts.iterative_tester_messages``). Each answer is parsed like every tester answer
(``data.parsing.extract_tests``); the first test not already in the suite joins it, so a round
whose answer holds no usable new test adds nothing (its slot still counts in Pass@k's N × K).
Round i samples with seed ``seed + i - 1``, so a run is reproducible and its rounds differ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from codea1.data.parsing import extract_tests
from codea1.data.prompts import iterative_tester_messages
from codea1.engine.base import Policy, SamplingParams
from codea1.eval.suite_eval import suite_from_lines
from codea1.types import Problem, RejectedAssert, TestCase, TestExtraction


def function_code(problem: Problem) -> str:
    """The function under test as the tester sees it and the mutants change it: ULT's ``code``
    (``metadata["function"]``), else the reference."""
    code = problem.metadata.get("function")
    return code if isinstance(code, str) and code.strip() else problem.reference


def assert_line(test: TestCase) -> str:
    """A test as the one-line assert shown in later rounds."""
    return f"assert {test.call} == {test.predicted}"


def sample_iterative(
    policy: Policy, problems: Sequence[Problem], params: SamplingParams, k: int
) -> dict[str, list[TestExtraction]]:
    """K rounds per problem, all problems of a round in one batch; one suite per problem."""
    tests: dict[str, list[TestCase]] = {p.id: [] for p in problems}
    rejected: dict[str, list[RejectedAssert]] = {p.id: [] for p in problems}
    for round_index in range(k):
        prompts = [
            policy.render(
                iterative_tester_messages(p, function_code(p), [assert_line(t) for t in tests[p.id]])
            )
            for p in problems
        ]
        seed = None if params.seed is None else params.seed + round_index
        for c in policy.generate(prompts, dataclasses.replace(params, n=1, seed=seed)):
            p = problems[c.prompt_index]
            found = extract_tests(c.text, p.entry_point)
            rejected[p.id].extend(found.rejected)
            new = next((t for t in found.tests if t not in tests[p.id]), None)
            if new is not None:
                tests[p.id].append(new)
    return {p.id: [TestExtraction(tuple(tests[p.id]), tuple(rejected[p.id]))] for p in problems}


def example_suites(problems: Sequence[Problem]) -> dict[str, list[TestExtraction]]:
    """Each problem's own example tests (ULT's ``test_list``) as the suite a tester wrote."""
    out: dict[str, list[TestExtraction]] = {}
    for p in problems:
        lines = p.metadata.get("example_tests") or []
        out[p.id] = [suite_from_lines([str(t) for t in lines], p.entry_point)]
    return out
