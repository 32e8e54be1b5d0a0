"""The mutants the mutation term pays for (docs/algorithm.md, deviation D12): per problem, drawn and
filtered on the golden tests in the sandbox once per problem for a whole run (:class:`MutantPool`
keeps them).

Which mutants (:func:`draw_mutants`): a seeded uniform sample of ``reward.mutation_mutants`` from the
union of two sources, **none of them a mutant that ``eval/tester/mut@k`` counts**:

- the mutants of **Cosmic-Ray's operators** (:mod:`codea1.eval.cosmic_mutants`, the operators of the
  paper's tester benchmark; when the ``cosmic-ray`` package is installed), e.g. ``a + b`` →
  ``a * b``, ``a // b``, ``a ** b``;
- the **second-order** mutants of codea1's AST mutator (:mod:`codea1.eval.mutants` applied to each
  of the reference's first-order mutants), which also cover calls and returns.

Every first-order mutant of codea1's AST mutator (the set evaluation's mutants are taken from,
whatever ``eval.max_mutants`` is) and the reference itself are removed, comparing sources as
``ast.unparse`` writes them. One-line functions have few AST mutants and fewer second-order ones
(7 of the 12 ``demo:easy-train`` problems have none), which is why Cosmic-Ray's operators are in.

Which earn nothing: a mutant that passes every usable golden test is *equivalent* (the reference's
own tests cannot tell it from the reference; its Golden-Tests reward would be 1); a mutant that
does not load, or that runs out of a budget on a golden test, is *dropped* (any test would "kill"
it, and every test call against it would spend a whole budget). A problem without golden tests, or
whose golden tests have no usable oracle, has no live mutant: its term is 0, with the reason.
"""

from __future__ import annotations

import ast
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from codea1.data.parsing import extract_tests
from codea1.eval.cosmic_mutants import MutantsUnavailable, cosmic_ray_mutants
from codea1.eval.mutants import generate_mutants
from codea1.types import ExecGrid, GridJob, Problem, TestCase


class GridRunner(Protocol):
    """What the filter needs from the sandbox (the scoring's grid runner)."""

    def run_grids(self, jobs: Sequence[GridJob], *, rel_tol: float, abs_tol: float) -> list[ExecGrid]:
        """Execute every job; one :class:`ExecGrid` per job, same order."""
        ...


@dataclass(frozen=True)
class LiveMutants:
    """One problem's training mutants after the filter."""

    programs: tuple[str, ...]
    """The live mutants as candidate programs (the problem's imports prepended), in draw order."""
    generated: int = 0
    """Mutants drawn."""
    equivalent: int = 0
    """Drawn mutants that passed every usable golden test."""
    dropped: int = 0
    """Drawn mutants that did not load or ran out of a budget on a golden test."""
    filter_seconds: float = 0.0
    """Seconds the draw and the filter took (their first time; 0 when they came from the cache)."""
    reason: str = ""
    """Why there is no live mutant, when there is none for a reason other than the filter."""

    def stats(self) -> dict[str, float]:
        """The counts the step metrics sum (``verdicts`` is added by scoring)."""
        return {"generated": float(self.generated), "equivalent": float(self.equivalent),
                "dropped": float(self.dropped), "live": float(len(self.programs)),
                "filter_seconds": self.filter_seconds}  # fmt: skip


def draw_mutants(reference: str, budget: int, seed: int) -> list[str]:
    """Up to ``budget`` distinct training mutants of ``reference`` (the module docstring says which;
    ``SyntaxError`` when it does not parse), as ``ast.unparse`` writes them. Deterministic in
    (``reference``, ``seed``): a seeded uniform sample of the candidates, in candidate order."""
    first = generate_mutants(reference)
    forbidden = {_normal(reference)} | {m.source for m in first}
    candidates: dict[str, None] = {}
    try:
        for m in cosmic_ray_mutants(reference):
            candidates.setdefault(_normal(m.source))
    except MutantsUnavailable:
        pass  # the AST mutator's second-order mutants alone
    for m in first:
        for s in generate_mutants(m.source):
            candidates.setdefault(s.source)
    pool = [c for c in candidates if c not in forbidden]
    if len(pool) <= budget:
        return pool
    keep = sorted(random.Random(f"{seed}\0{reference}").sample(range(len(pool)), budget))
    return [pool[i] for i in keep]


def _normal(source: str) -> str:
    """``source`` as the mutator writes its mutants (``ast.unparse`` and a newline)."""
    return ast.unparse(ast.parse(source)) + "\n"


def _program(problem: Problem, code: str) -> str:
    return f"{problem.imports.rstrip()}\n{code}" if problem.imports.strip() else code


def _golden_tests(problem: Problem) -> tuple[TestCase, ...]:
    """The golden asserts as tests the grid can run (``assert f(x) is True`` included, as an equality)."""
    tests: dict[TestCase, None] = {}
    for snippet in problem.golden_tests:
        tests.update(dict.fromkeys(extract_tests(_identity_as_equality(snippet), problem.entry_point).tests))
    return tuple(tests)


def _identity_as_equality(snippet: str) -> str:
    """``assert CALL is True`` (or ``False`` / ``None``) as ``assert CALL == True``: the test parser
    takes equalities only, and for these three constants the sandbox's type-aware equality gives the
    identity's verdict (``1 == True`` fails there: the types differ). Anything else is left as it is."""
    try:
        tree = ast.parse(snippet)
    except (SyntaxError, ValueError):
        return snippet
    changed = False
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Is)
            and isinstance(node.comparators[0], ast.Constant)
            and any(node.comparators[0].value is c for c in (True, False, None))
        ):
            node.ops = [ast.Eq()]
            changed = True
    return ast.unparse(tree) if changed else snippet


def _judged(drawn: Sequence[str], problem: Problem, grid: ExecGrid, seconds: float) -> LiveMutants:
    usable = [t for t, o in enumerate(grid.oracle) if o.usable]
    if not usable:
        return LiveMutants((), len(drawn), 0, len(drawn), seconds, "no golden test has a usable oracle")
    live, equivalent, dropped = [], 0, 0
    for i, source in enumerate(drawn):
        verdicts = [grid.verdicts[i][t] for t in usable]
        if not grid.code_status[i].passed or any(v.status in ("timeout", "memory") for v in verdicts):
            dropped += 1
        elif all(v.passed for v in verdicts):
            equivalent += 1
        else:
            live.append(_program(problem, source))
    return LiveMutants(tuple(live), len(drawn), equivalent, dropped, seconds)


class MutantPool:
    """The live training mutants of every problem seen so far (the reference and its golden tests do
    not change during a run, so each problem is drawn and filtered once)."""

    def __init__(self, budget: int, seed: int) -> None:
        self.budget = budget
        self.seed = seed
        self._cache: dict[tuple[str, ...], LiveMutants] = {}

    @staticmethod
    def _key(p: Problem) -> tuple[str, ...]:
        return (p.id, p.reference, p.imports, p.entry_point, *p.golden_tests)

    def live(
        self, problems: Sequence[Problem], runner: GridRunner, *, rel_tol: float, abs_tol: float
    ) -> list[LiveMutants]:
        """Each problem's live mutants, in order: the cached ones (``filter_seconds`` 0), the others
        drawn now and filtered in one sandbox call. A sandbox failure gives those problems no live
        mutant for this call (with the reason) and is not cached."""
        out: dict[int, LiveMutants] = {}
        todo: list[tuple[int, Problem, list[str], GridJob, float]] = []
        for i, p in enumerate(problems):
            key = self._key(p)
            if key in self._cache:
                out[i] = replace(self._cache[key], filter_seconds=0.0)
                continue
            start = time.perf_counter()
            tests = _golden_tests(p)
            if not tests:
                out[i] = self._cache[key] = LiveMutants((), reason="no golden tests")
                continue
            try:
                drawn = draw_mutants(p.reference, self.budget, self.seed)
            except SyntaxError:
                out[i] = self._cache[key] = LiveMutants((), reason="the reference does not parse")
                continue
            if not drawn:
                out[i] = self._cache[key] = LiveMutants(
                    (), reason="no training mutant (docs/algorithm.md, D12)"
                )
                continue
            job = GridJob(p.id, p.reference, p.entry_point, tuple(_program(p, m) for m in drawn), tests)
            todo.append((i, p, drawn, job, time.perf_counter() - start))
        if todo:
            start = time.perf_counter()
            try:
                grids = runner.run_grids([t[3] for t in todo], rel_tol=rel_tol, abs_tol=abs_tol)
                if len(grids) != len(todo):
                    raise RuntimeError(f"sandbox returned {len(grids)} grids for {len(todo)} jobs")
            except Exception as e:  # noqa: BLE001 - the term is 0 this call, with the reason
                for i, *_ in todo:
                    out[i] = LiveMutants((), reason=f"sandbox: {type(e).__name__}: {e}")
                return [out[i] for i in range(len(problems))]
            share = (time.perf_counter() - start) / len(todo)
            for (i, p, drawn, _, own), grid in zip(todo, grids, strict=True):
                out[i] = self._cache[self._key(p)] = _judged(drawn, p, grid, own + share)
        return [out[i] for i in range(len(problems))]
