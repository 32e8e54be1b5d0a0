"""Test-generation evaluation (UnLeakedTestBench-style metrics) of tests written for reference code.

For each problem the first ``k`` parsed tests of the Test LLM's suite are judged against the
reference in the sandbox (``run_grids``: the oracle value comes from the reference):

* validity: share of the considered tests that run on the reference and whose predicted value agrees;
* pass@k (ULT): Σ valid tests / (N problems × k);
* mut@k: per problem, the share of non-equivalent AST mutants of the reference (``eval.mutants``)
  that at least one valid test kills (a verdict other than ``pass``), averaged over problems.
  A mutant that passes the problem's own harness is *equivalent on the golden tests*: it is excluded
  from the denominator and counted;
* line / branch coverage of the reference under the valid tests' calls (``eval.coverage_run``);
* Mul = pass@k × mut@k / 100;
* defect detection: the share of known-wrong codes (samples failing the harness) that a valid test
  catches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

from codea1.data.parsing import extract_tests
from codea1.data.prompts import tester_messages
from codea1.engine.base import Policy, SamplingParams
from codea1.eval.code_eval import Checker, CodeInput, candidate_program, check_completions, code_of
from codea1.eval.coverage_run import reference_coverage
from codea1.eval.mutants import generate_mutants
from codea1.eval.tables import group_by_source
from codea1.sandbox.test_names import problem_job
from codea1.types import CheckJob, ExecGrid, GridJob, Problem, TestExtraction


class GridRunner(Checker, Protocol):
    """What test evaluation needs from the sandbox: harness checks and code × test grids."""

    def run_grids(self, jobs: Sequence[GridJob]) -> list[ExecGrid]: ...


def suite_from_lines(lines: Sequence[str], entry_point: str) -> TestExtraction:
    """Parse a list of ``assert`` lines (the ``"tests"`` form of a tests file) as one suite."""
    return extract_tests("```python\n" + "\n".join(lines) + "\n```", entry_point)


def sample_suites(
    policy: Policy,
    problems: Sequence[Problem],
    params: SamplingParams,
    k: int,
    view: Literal["whitebox", "blackbox"] = "whitebox",
) -> dict[str, list[TestExtraction]]:
    """Ask the Test LLM for ``k`` tests per problem (white-box: the reference is the code shown)."""
    prompts = [policy.render(tester_messages(p, p.reference, n_tests=k, view=view)) for p in problems]
    out: dict[str, list[TestExtraction]] = {p.id: [] for p in problems}
    for c in policy.generate(prompts, params):
        p = problems[c.prompt_index]
        out[p.id].append(extract_tests(c.text, p.entry_point))
    return out


def golden_harness(problem: Problem) -> str | None:
    """The problem's harness, or one built from its golden asserts; None when it has neither."""
    if problem.harness:
        return problem.harness
    if not problem.golden_tests:
        return None
    body = "\n".join("    " + line for t in problem.golden_tests for line in t.splitlines())
    return f"def check(candidate):\n    {problem.entry_point} = candidate\n{body}\n"


def evaluate_suites(
    problems: Sequence[Problem],
    suites: Mapping[str, TestExtraction],
    runner: GridRunner,
    budgets: Mapping[str, float],
    *,
    k: int,
    max_mutants: int = 30,
    wrong_codes: Mapping[str, Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """Score one suite per problem; one record per problem (see the module docstring for metrics).

    ``wrong_codes`` maps a problem id to candidate programs known to fail its harness.
    """
    mutants = {p.id: generate_mutants(p.reference, limit=max_mutants) for p in problems}
    equivalent = _equivalent_mutants(problems, mutants, runner, budgets)
    jobs: list[GridJob] = []
    for p in problems:
        tests = tuple(suites[p.id].tests[:k]) if p.id in suites else ()
        live = [m.source for m, eq in zip(mutants[p.id], equivalent[p.id], strict=False) if not eq]
        wrong = tuple((wrong_codes or {}).get(p.id, ()))
        codes = (p.reference, *(candidate_program(p, m) for m in live), *wrong)
        jobs.append(problem_job(p, codes, tests))
    grids = runner.run_grids(jobs) if jobs else []
    records = []
    for p, job, grid in zip(problems, jobs, grids, strict=True):
        records.append(_record(p, suites.get(p.id), job, grid, mutants[p.id], equivalent[p.id], k))
    return records


def known_wrong_codes(
    problems: Sequence[Problem],
    codes: Mapping[str, Sequence[CodeInput]],
    checker: Checker,
    budgets: Mapping[str, float],
) -> dict[str, list[str]]:
    """Defect detection's material: per problem, the candidate programs of ``codes`` that fail its harness.

    Samples without usable code are left out (there is no program to catch).
    """
    checked = check_completions(problems, {p.id: codes.get(p.id, []) for p in problems}, checker, budgets)
    wrong: dict[str, list[str]] = {}
    for p, rec in zip(problems, checked, strict=False):
        for item, ok in zip(codes.get(p.id, []), rec["correct"], strict=False):
            code, _ = code_of(p, item)
            if code is not None and not ok:
                wrong.setdefault(p.id, []).append(candidate_program(p, code))
    return wrong


def suites_checker(
    suites_for: Callable[[list[Problem]], Mapping[str, Sequence[TestExtraction]]],
    codes_for: Callable[[list[Problem]], Mapping[str, Sequence[CodeInput]]] | None,
    *,
    k: int,
    max_mutants: int,
) -> Callable[[list[Problem], GridRunner, Mapping[str, float]], list[dict[str, Any]]]:
    """The chunk check of ``eval tests``: the first suite ``suites_for`` gives each problem of a chunk,
    scored; with ``codes_for``, the code samples failing the harness measure defect detection."""

    def check(chunk: list[Problem], runner: GridRunner, budgets: Mapping[str, float]) -> list[dict[str, Any]]:
        suites = {pid: s[0] for pid, s in suites_for(chunk).items() if s}
        wrong = known_wrong_codes(chunk, codes_for(chunk), runner, budgets) if codes_for is not None else {}
        return evaluate_suites(
            chunk, suites, runner, budgets, k=k, max_mutants=max_mutants, wrong_codes=wrong
        )

    return check


def _equivalent_mutants(
    problems: Sequence[Problem],
    mutants: Mapping[str, Sequence[Any]],
    runner: Checker,
    budgets: Mapping[str, float],
) -> dict[str, list[bool]]:
    """Per problem and mutant: True when the mutant passes the problem's golden harness."""
    jobs: list[CheckJob] = []
    owners: list[tuple[str, int]] = []
    out: dict[str, list[bool]] = {p.id: [False] * len(mutants[p.id]) for p in problems}
    for p in problems:
        harness = golden_harness(p)
        if harness is None:
            continue
        for i, m in enumerate(mutants[p.id]):
            program = candidate_program(p, m.source)
            jobs.append(CheckJob(f"{p.id}~m{i}", program, p.entry_point, harness, budgets[p.id]))
            owners.append((p.id, i))
    for (pid, i), verdict in zip(owners, runner.run_checks(jobs) if jobs else [], strict=True):
        out[pid][i] = verdict.passed
    return out


def _record(
    p: Problem,
    suite: TestExtraction | None,
    job: GridJob,
    grid: ExecGrid,
    mutants: Sequence[Any],
    equivalent: Sequence[bool],
    k: int,
) -> dict[str, Any]:
    valid = [o.status == "valid" for o in grid.oracle]
    n_live = sum(1 for e in equivalent if not e)
    rows = grid.verdicts

    def caught(row: int) -> bool:
        return any(ok and not rows[row][t].passed for t, ok in enumerate(valid))

    killed = [caught(1 + i) for i in range(n_live)]
    wrong_rows = range(1 + n_live, len(job.codes))
    calls = [t.call for t, ok in zip(job.tests, valid, strict=False) if ok]
    cov = reference_coverage(p.reference, calls)
    live_kinds = [m.kind for m, e in zip(mutants, equivalent, strict=False) if not e]
    kinds: dict[str, list[int]] = {}
    for kind, kill in zip(live_kinds, killed, strict=False):
        kinds.setdefault(kind, [0, 0])
        kinds[kind][0] += 1
        kinds[kind][1] += int(kill)
    return {
        "id": p.id,
        "source": p.source,
        "k": k,
        "tests": [t.to_dict() for t in job.tests],
        "rejected": len(suite.rejected) if suite else 0,
        "oracle": [o.status for o in grid.oracle],
        "valid": sum(valid),
        "reference_passes_valid": not caught(0),
        "mutants": len(mutants),
        "equivalent": sum(equivalent),
        "killed": sum(killed),
        "mutation_score": (sum(killed) / n_live) if n_live else None,
        "kinds": kinds,
        "line_coverage": cov.line,
        "branch_coverage": cov.branch,
        "coverage_error": cov.error,
        "wrong_codes": len(wrong_rows),
        "detected": sum(caught(r) for r in wrong_rows),
    }


def summarize_tests(records: Sequence[Mapping[str, Any]], k: int) -> dict[str, dict[str, float]]:
    """Per benchmark and over all problems: validity, pass@k, mut@k, coverage, Mul, detection (percent)."""
    groups = group_by_source(records)
    out: dict[str, dict[str, float]] = {}
    for name, rows in groups.items():
        considered = sum(len(r["tests"]) for r in rows)
        valid = sum(r["valid"] for r in rows)
        scored = [r["mutation_score"] for r in rows if r["mutation_score"] is not None]
        pass_k = 100.0 * valid / (len(rows) * k)
        mut_k = 100.0 * sum(scored) / len(scored) if scored else 0.0
        wrong = sum(r["wrong_codes"] for r in rows)
        metrics: dict[str, float] = {
            "validity": 100.0 * valid / considered if considered else 0.0,
            f"pass@{k}": pass_k,
            f"mut@{k}": mut_k,
            "Mul": pass_k * mut_k / 100.0,
            "line_cov": sum(r["line_coverage"] for r in rows) / len(rows),
            "branch_cov": sum(r["branch_coverage"] for r in rows) / len(rows),
            "mutants": sum(r["mutants"] for r in rows),
            "equivalent": sum(r["equivalent"] for r in rows),
            "problems": len(rows),
        }
        if wrong:
            metrics["detected"] = 100.0 * sum(r["detected"] for r in rows) / wrong
            metrics["wrong_codes"] = wrong
        out[name] = metrics
    return out
