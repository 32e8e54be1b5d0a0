"""Test-time collaboration (best-of-N, CodeT-style): rank N code samples by their pass rate on tests
a Test LLM wrote black-box from the question, and report the correctness of the chosen sample.

No reference solution is used for ranking: a generated test ``assert CALL == PRED`` passes on a
candidate when the candidate's value of ``CALL`` equals the *predicted* value ``PRED`` (floats with
a relative/absolute tolerance of 1e-6). Each (code, test) pair runs as one sandboxed harness check.
Correctness of each sample comes from the problem's own harness. Per problem:

* chosen: mean correctness of the samples with the highest pass rate (the expected value of
  breaking ties at random);
* random: mean correctness of all samples (the expected value of picking one at random);
* oracle: 1 if any sample is correct.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from codea1.data.parsing import extract_tests
from codea1.data.prompts import tester_messages
from codea1.engine.base import Policy, SamplingParams
from codea1.eval.code_eval import Checker, CodeInput, candidate_program, check_completions, code_of
from codea1.eval.tables import group_by_source
from codea1.types import CheckJob, Problem, TestCase, TestExtraction

_COMPARE = """
import math as _math


def _same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            return a == b or _math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and type(a) is type(b):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b
"""


def prediction_harness(test: TestCase, entry_point: str) -> str:
    """A harness whose ``check(candidate)`` passes when the candidate's value of the call equals the
    test's predicted value (the test's own expectation, not a reference oracle)."""
    return (
        f"{_COMPARE}\n\ndef check(candidate):\n"
        f"    {entry_point} = candidate\n"
        f"    _expected = ({test.predicted})\n"
        f"    _got = ({test.call})\n"
        f"    assert _same(_got, _expected)\n"
    )


def sample_blackbox_suites(
    policy: Policy, problems: Sequence[Problem], params: SamplingParams, n_tests: int
) -> dict[str, list[TestExtraction]]:
    """``params.n`` black-box suites (question only) of ``n_tests`` asserts per problem."""
    prompts = [policy.render(tester_messages(p, None, n_tests=n_tests, view="blackbox")) for p in problems]
    out: dict[str, list[TestExtraction]] = {p.id: [] for p in problems}
    for c in policy.generate(prompts, params):
        p = problems[c.prompt_index]
        out[p.id].append(extract_tests(c.text, p.entry_point))
    return out


def rank_and_select(
    problems: Sequence[Problem],
    codes: Mapping[str, Sequence[CodeInput]],
    suites: Mapping[str, Sequence[TestExtraction]],
    checker: Checker,
    budgets: Mapping[str, float],
    test_cpu_s: float = 2.0,
) -> list[dict[str, Any]]:
    """One record per problem: per-sample correctness and pass rate, and chosen/random/oracle scores."""
    correctness = check_completions(problems, codes, checker, budgets)
    jobs: list[CheckJob] = []
    owners: list[tuple[int, int]] = []
    pools: list[list[TestCase]] = []
    unusable: list[set[int]] = []
    for pi, p in enumerate(problems):
        pool = list(dict.fromkeys(t for s in suites.get(p.id, ()) for t in s.tests))
        pools.append(pool)
        unusable.append(set())
        for ci, item in enumerate(codes.get(p.id, ())):
            code, _ = code_of(p, item)
            if code is None:
                unusable[pi].add(ci)
                continue
            program = candidate_program(p, code)
            for ti, test in enumerate(pool):
                harness = prediction_harness(test, p.entry_point)
                jobs.append(CheckJob(f"{p.id}#{ci}t{ti}", program, p.entry_point, harness, test_cpu_s))
                owners.append((pi, ci))
    passes = [[0] * len(codes.get(p.id, ())) for p in problems]
    for (pi, ci), verdict in zip(owners, checker.run_checks(jobs) if jobs else [], strict=True):
        passes[pi][ci] += int(verdict.passed)
    records = []
    for p, rec, pool, row, bad in zip(problems, correctness, pools, passes, unusable, strict=True):
        correct = rec["correct"]
        rates = [-1.0 if ci in bad else (c / len(pool) if pool else 0.0) for ci, c in enumerate(row)]
        best = max(rates) if rates else 0.0
        top = [c for c, r in zip(correct, rates, strict=False) if r == best]
        records.append(
            {
                "id": p.id,
                "source": p.source,
                "correct": correct,
                "pass_rate": rates,
                "tests": len(pool),
                "chosen": sum(top) / len(top) if top else 0.0,
                "random": sum(correct) / len(correct) if correct else 0.0,
                "oracle": float(any(correct)),
            }
        )
    return records


def bon_checker(
    codes_for: Callable[[list[Problem]], Mapping[str, Sequence[CodeInput]]],
    suites_for: Callable[[list[Problem]], Mapping[str, Sequence[TestExtraction]]],
) -> Callable[[list[Problem], Checker, Mapping[str, float]], list[dict[str, Any]]]:
    """The chunk check of ``eval bon``: the code samples and test suites given for a chunk (sampled or
    read), ranked and scored by :func:`rank_and_select`."""

    def check(chunk: list[Problem], checker: Checker, budgets: Mapping[str, float]) -> list[dict[str, Any]]:
        return rank_and_select(chunk, codes_for(chunk), suites_for(chunk), checker, budgets)

    return check


def summarize_bon(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per benchmark and overall: chosen / random / oracle pass@1 (percent)."""
    groups = group_by_source(records)
    out: dict[str, dict[str, float]] = {}
    for name, rows in groups.items():
        n = len(rows)
        out[name] = {
            "chosen@1": 100.0 * sum(r["chosen"] for r in rows) / n,
            "random@1": 100.0 * sum(r["random"] for r in rows) / n,
            "oracle": 100.0 * sum(r["oracle"] for r in rows) / n,
            "problems": n,
        }
    return out
