"""UnLeakedTestBench's metrics of a Test LLM's suites (the ``iterative`` protocol of ``eval tests``).

Per function, the first ``k`` tests of its suite are judged like every generated test: in the
sandbox's grid (``run_grids``), the oracle value coming from the function itself. ULT's metrics:

* **Pass@k** = Σ correct tests / (N × k); a test is correct when it passes on the function itself
  (oracle ``valid``: the call ran and the asserted value equals what the function returned);
* **LCov@k / BCov@k**: the share of the function's lines / branches run by its first k tests, the
  mean over functions; every test that was not refused counts, correct or not (pytest-cov measures
  whatever the test ran), measured inside the sandbox (``eval.sandbox_coverage``);
* **Mut@k**: per function, the share of its mutants (Cosmic-Ray's operators by default,
  ``eval.cosmic_mutants``) that a correct test among the first k kills (a verdict other than
  ``pass``: a different value, an exception, a timeout), the mean over the functions that have
  mutants; no mutant is set aside as equivalent (ULT has no ground-truth suite to tell);
* **Mul** = Pass@k × Mut@k / 100.

A function whose code needs a module the sandbox cannot import (ULT's ``numpy`` / ``pandas``, or one
it imports itself; ``metadata["needs"]``) is not scored: its record says which, and the summary counts
it as ``unavailable``. docs/evaluation.md says where these differ from the one-suite protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from codea1.eval.code_eval import candidate_program
from codea1.eval.cosmic_mutants import cosmic_ray_mutants
from codea1.eval.mutants import Mutant, generate_mutants
from codea1.eval.sandbox_coverage import TaskRunner, analyse, measure_arcs, percentages
from codea1.eval.suite_eval import GridRunner
from codea1.eval.tables import group_by_source
from codea1.eval.ult_sampling import function_code
from codea1.sandbox.test_names import problem_job
from codea1.types import ExecGrid, GridJob, Problem, TestCase, TestExtraction

MUTANT_SOURCES: dict[str, Callable[[str, int], list[Mutant]]] = {
    "cosmic-ray": lambda code, limit: cosmic_ray_mutants(code, limit=limit),
    "ast": lambda code, limit: generate_mutants(code, limit=limit),
}
"""Where the mutants of ``--mutants`` come from: Cosmic-Ray's operators or codea1's AST mutator."""
_PROBE = "_codea1_probe"


class UltRunner(GridRunner, TaskRunner, Protocol):
    """What the protocol needs from the sandbox: grids for the verdicts, program tasks for coverage."""


def available_modules(runner: GridRunner, modules: Sequence[str]) -> dict[str, bool]:
    """Whether the sandbox can import each module (one tiny program per module, in the grid)."""
    names = sorted({m for m in modules if m.isidentifier()})
    jobs = [
        GridJob(
            f"probe:{m}",
            f"import {m}\n\n\ndef {_PROBE}():\n    return 1\n",
            _PROBE,
            (),
            (TestCase(f"{_PROBE}()", "1"),),
        )
        for m in names
    ]
    grids = runner.run_grids(jobs) if jobs else []
    found = {m: g.oracle[0].status == "valid" for m, g in zip(names, grids, strict=True)}
    return {m: found.get(m, False) for m in modules}


def _missing(problem: Problem, available: Mapping[str, bool]) -> list[str]:
    return [m for m in problem.metadata.get("needs") or [] if not available.get(m, False)]


def evaluate_iterative(
    problems: Sequence[Problem],
    suites: Mapping[str, TestExtraction],
    runner: UltRunner,
    *,
    k: int,
    max_mutants: int = 30,
    mutant_source: str = "cosmic-ray",
) -> list[dict[str, Any]]:
    """One record per problem: the first ``k`` tests judged, their coverage, the mutants they kill."""
    needs = sorted({m for p in problems for m in p.metadata.get("needs") or []})
    available = available_modules(runner, needs)
    make = MUTANT_SOURCES[mutant_source]
    scored: list[Problem] = []
    records: dict[str, dict[str, Any]] = {}
    for p in problems:
        missing = _missing(p, available)
        if missing:
            records[p.id] = {"id": p.id, "source": p.source, "k": k, "unavailable": missing}
        else:
            scored.append(p)
    mutants = {p.id: make(function_code(p), max_mutants) for p in scored}
    tests = {p.id: tuple(suites[p.id].tests[:k]) if p.id in suites else () for p in scored}
    # The question's helpers, not its names check: every code here is the reference or one of its
    # mutants, which define every name the reference does, and the tester is shown that code, so a
    # test using its classes (ULT's own example tests build ``Square(4, 4)``) is fair.
    jobs = [
        replace(
            problem_job(
                p, (p.reference, *(candidate_program(p, m.source) for m in mutants[p.id])), tests[p.id]
            ),
            question_names=None,
        )
        for p in scored
    ]
    grids = runner.run_grids(jobs) if jobs else []
    cov_jobs = [(p.imports, function_code(p), p.entry_point, [t.call for t in tests[p.id]]) for p in scored]
    arcs = measure_arcs(runner, cov_jobs) if cov_jobs else []
    for p, grid, row in zip(scored, grids, arcs, strict=True):
        records[p.id] = _record(p, suites.get(p.id), tests[p.id], grid, mutants[p.id], row, k, mutant_source)
    return [records[p.id] for p in problems]


def _coverage_at(
    code: str, row: Sequence[set[tuple[int, int]] | None]
) -> tuple[list[float], list[float], str]:
    """LCov and BCov after each test (cumulative), and an error when the code cannot be analysed."""
    try:
        analysis = analyse(code)
    except (SyntaxError, ValueError) as e:
        return [0.0] * len(row), [0.0] * len(row), f"cannot analyse the function: {e}"
    run: set[tuple[int, int]] = set()
    lines, branches = [], []
    for arcs in row:
        run |= arcs or set()
        line, branch = percentages(analysis, run)
        lines.append(line)
        branches.append(branch)
    if not row:
        line, branch = percentages(analysis, set())
        lines, branches = [line], [branch]
    return lines, branches, ""


def _record(
    p: Problem,
    suite: TestExtraction | None,
    tests: tuple[TestCase, ...],
    grid: ExecGrid,
    mutants: Sequence[Mutant],
    arcs: Sequence[set[tuple[int, int]] | None],
    k: int,
    mutant_source: str,
) -> dict[str, Any]:
    correct = [o.status == "valid" for o in grid.oracle]
    rows = grid.verdicts
    killed_by = [
        {m for m in range(len(mutants)) if not rows[1 + m][t].passed} if ok else set()
        for t, ok in enumerate(correct)
    ]
    killed_at: list[int] = []
    so_far: set[int] = set()
    for kills in killed_by:
        so_far |= kills
        killed_at.append(len(so_far))
    kinds: dict[str, list[int]] = {}
    for m, mutant in enumerate(mutants):
        entry = kinds.setdefault(mutant.kind, [0, 0])
        entry[0] += 1
        entry[1] += int(m in so_far)
    lines, branches, cov_error = _coverage_at(function_code(p), arcs)
    return {
        "id": p.id,
        "source": p.source,
        "k": k,
        "protocol": "iterative",
        "tests": [t.to_dict() for t in tests],
        "rejected": len(suite.rejected) if suite else 0,
        "oracle": [o.status for o in grid.oracle],
        "oracle_reason": [o.reason for o in grid.oracle],
        "valid": sum(correct),
        "mutant_source": mutant_source,
        "mutants": len(mutants),
        "equivalent": 0,
        "killed": len(so_far),
        "killed_at": killed_at,
        "mutation_score": len(so_far) / len(mutants) if mutants else None,
        "kinds": kinds,
        "line_coverage": lines[-1],
        "branch_coverage": branches[-1],
        "line_coverage_at": lines,
        "branch_coverage_at": branches,
        "coverage_measured": sum(a is not None for a in arcs),
        "coverage_error": cov_error,
    }


def summarize_iterative(records: Sequence[Mapping[str, Any]], k: int) -> dict[str, dict[str, float]]:
    """Per benchmark and over all: Pass@k, LCov@k, BCov@k, Mut@k, Mul (percent) and the counts."""
    scored = [r for r in records if not r.get("unavailable")]
    unavailable = group_by_source([r for r in records if r.get("unavailable")])
    out: dict[str, dict[str, float]] = {}
    for name, rows in group_by_source(scored).items():
        with_mutants = [r["mutation_score"] for r in rows if r["mutation_score"] is not None]
        pass_k = 100.0 * sum(r["valid"] for r in rows) / (len(rows) * k)
        mut_k = 100.0 * sum(with_mutants) / len(with_mutants) if with_mutants else 0.0
        out[name] = {
            f"pass@{k}": pass_k,
            f"LCov@{k}": sum(r["line_coverage"] for r in rows) / len(rows),
            f"BCov@{k}": sum(r["branch_coverage"] for r in rows) / len(rows),
            f"mut@{k}": mut_k,
            "Mul": pass_k * mut_k / 100.0,
            "correct_tests": sum(r["valid"] for r in rows),
            "all_correct": sum(r["valid"] == k for r in rows),
            "mutants": sum(r["mutants"] for r in rows),
            "problems": len(rows),
            "unavailable": len(unavailable.get(name, [])),
        }
    for name, rows in unavailable.items():
        out.setdefault(name, {"problems": 0, "unavailable": len(rows)})
    return out


def iterative_checker(
    suites_for: Callable[[list[Problem]], Mapping[str, Sequence[TestExtraction]]],
    *,
    k: int,
    max_mutants: int,
    mutant_source: str,
) -> Callable[[list[Problem], UltRunner, Mapping[str, float]], list[dict[str, Any]]]:
    """The chunk check of ``eval tests --protocol iterative``: the first suite ``suites_for`` gives
    each problem of a chunk (written round by round, or read), scored (the budgets are the sandbox's)."""

    def check(chunk: list[Problem], runner: UltRunner, budgets: Mapping[str, float]) -> list[dict[str, Any]]:
        del budgets
        suites = {pid: s[0] for pid, s in suites_for(chunk).items() if s}
        return evaluate_iterative(
            chunk, suites, runner, k=k, max_mutants=max_mutants, mutant_source=mutant_source
        )

    return check
