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
``ast.unparse`` writes them. The draw builds only the candidates it samples (a bounded number, see
:func:`draw_mutants`), never every second-order mutant of a large reference.

No behavioural twins: a source-text check cannot see that ``x * 1`` behaves like the evaluation
mutant ``x + 0``. So the filter also runs the evaluation's mutants (the first ``eval.max_mutants``
of the AST mutator, as ``eval tests`` takes them) on the golden tests' calls and on seeded extra
calls with arguments of the same types (:mod:`codea1.eval.typed_inputs`), and a drawn mutant whose
outcome equals one evaluation mutant's on every one of those calls (an equal value, or the same
exception) is a *twin*: left out, like an equivalent one. One-line functions have few AST mutants and fewer second-order ones
(7 of the 12 ``demo:easy-train`` problems have none), which is why Cosmic-Ray's operators are in.

Each mutant carries its fault *kind* (:func:`draw_labelled_mutants`; the mutation-kinds term,
deviation D13): the AST mutator's kinds (``arithmetic``, ``comparison``, ``boolean``, ``constant``,
``return``, ``slice``, ``call``), Cosmic-Ray's operators mapped onto them (:data:`COSMIC_KINDS`, plus
``loop``, ``exception`` and ``decorator``), and for a second-order mutant the kinds of its two edits
joined by ``+`` in sorted order (one kind when both edits are of the same kind).

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
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Protocol

from codea1.config import EvalConfig
from codea1.data.parsing import extract_tests
from codea1.eval.cosmic_mutants import MutantsUnavailable, cosmic_ray_mutant, positions
from codea1.eval.mutants import generate_mutants, mutant_at, site_kinds
from codea1.eval.typed_inputs import extra_calls
from codea1.sandbox.test_names import problem_job
from codea1.types import ExecGrid, GridJob, Problem, TestCase, Verdict


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
    twins: int = 0
    """Drawn mutants left out as behavioural twins of an evaluation mutant (:func:`_twins`)."""
    filter_seconds: float = 0.0
    """Seconds the draw and the filter took (their first time; 0 when they came from the cache)."""
    reason: str = ""
    """Why there is no live mutant, when there is none for a reason other than the filter."""
    kinds: tuple[str, ...] = ()
    """The fault kind of each of ``programs`` (the module docstring says which)."""

    def stats(self) -> dict[str, float]:
        """The counts the step metrics sum (``verdicts`` is added by scoring)."""
        return {"generated": float(self.generated), "equivalent": float(self.equivalent),
                "dropped": float(self.dropped), "twins": float(self.twins), "live": float(len(self.programs)),
                "filter_seconds": self.filter_seconds}  # fmt: skip


EXTRA_PER_CALL = 2
"""Seeded extra calls per golden call on which twins are looked for (:mod:`codea1.eval.typed_inputs`)."""
BUILT_PER_MUTANT = 8
"""The draw builds at most this many candidate mutants per mutant it keeps (``reward.mutation_mutants``)."""
MIN_BUILT = 64
"""...and at least this many, so that a small budget still finds distinct ones."""


COSMIC_KINDS: dict[str, str] = {
    "ReplaceBinaryOperator": "arithmetic",
    "ReplaceComparisonOperator": "comparison",
    "AddNot": "boolean",
    "ReplaceTrueWithFalse": "boolean",
    "ReplaceFalseWithTrue": "boolean",
    "ReplaceAndWithOr": "boolean",
    "ReplaceOrWithAnd": "boolean",
    "NumberReplacer": "constant",
    "ReplaceBreakWithContinue": "loop",
    "ReplaceContinueWithBreak": "loop",
    "ZeroIterationForLoop": "loop",
    "ExceptionReplacer": "exception",
    "RemoveDecorator": "decorator",
}
"""The fault kind of a Cosmic-Ray operator family (``core/ReplaceBinaryOperator_Add_Mul`` is of
``ReplaceBinaryOperator``); ``ReplaceUnaryOperator`` is ``boolean`` when it makes or removes a
``not``, else ``arithmetic`` (:func:`cosmic_kind`). A family not listed is a kind of its own."""


def cosmic_kind(operator: str) -> str:
    """The fault kind of a Cosmic-Ray operator name (:data:`COSMIC_KINDS`)."""
    name = operator.split("/")[-1]
    family = name.split("_")[0]
    if family == "ReplaceUnaryOperator":
        return "boolean" if name.endswith("_Not") else "arithmetic"
    return COSMIC_KINDS.get(family, family)


def draw_mutants(reference: str, budget: int, seed: int) -> list[str]:
    """The sources of :func:`draw_labelled_mutants`, in draw order."""
    return list(draw_labelled_mutants(reference, budget, seed))


def draw_labelled_mutants(reference: str, budget: int, seed: int) -> dict[str, str]:
    """Up to ``budget`` distinct training mutants of ``reference`` (the module docstring says which;
    ``SyntaxError`` when it does not parse), as ``ast.unparse`` writes them, each with its fault kind
    (source → kind, in draw order). Deterministic in (``reference``, ``seed``).

    Every *site* of the two sources is a slot: each Cosmic-Ray (operator, occurrence) of the
    reference, and each mutation site of each first-order AST mutant (a second-order mutant).
    Slots are drawn uniformly without replacement (seeded) and only the drawn ones are built, until
    ``budget`` distinct mutants are kept or ``max(MIN_BUILT, BUILT_PER_MUTANT * budget)`` slots were
    built. Counting slots builds nothing, so the work is bounded by the budget, not by the
    reference's size squared (a 200-entry table has some 800 first-order mutants and 640,000
    second-order slots). When every slot fits in the bound, all are built: the draw is then a
    uniform sample of slots, each distinct mutant kept once.
    """
    first = generate_mutants(reference)
    forbidden = {_normal(reference)} | {m.source for m in first}
    try:
        cosmic = positions(reference)
    except MutantsUnavailable:
        cosmic = []  # the AST mutator's second-order mutants alone
    kinds = [site_kinds(m.source) for m in first]  # each second-order site's kind
    ends = list(accumulate([len(cosmic), *(len(k) for k in kinds)]))
    total = ends[-1]
    rng = random.Random(f"{seed}\0{reference}")
    kept: dict[str, str] = {}
    for slot in rng.sample(range(total), min(total, max(MIN_BUILT, BUILT_PER_MUTANT * budget))):
        if slot < len(cosmic):
            mutant = cosmic_ray_mutant(reference, cosmic[slot])
            source = None if mutant is None else _normal(mutant.source)
            kind = cosmic_kind(cosmic[slot][0])
        else:
            i = bisect_right(ends, slot) - 1  # first-order mutant i, its site slot - ends[i]
            source = mutant_at(first[i].source, slot - ends[i])
            kind = "+".join(sorted({first[i].kind, kinds[i][slot - ends[i]]}))
        if source is not None and source not in forbidden:
            kept.setdefault(source, kind)
            if len(kept) == budget:
                break
    return kept


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


def _judged(
    drawn: Mapping[str, str], problem: Problem, grid: ExecGrid, golden: int, twins: set[int], seconds: float
) -> LiveMutants:
    """Sort the drawn mutants (source → kind; the grid's first rows) on the golden tests (its first
    ``golden`` columns): dropped, equivalent, a twin (``twins``: rows that behave like an evaluation
    mutant) or live."""
    usable = [t for t in range(golden) if grid.oracle[t].usable]
    if not usable:
        return LiveMutants((), len(drawn), 0, len(drawn), 0, seconds, "no golden test has a usable oracle")
    live, kinds, equivalent, dropped, twin = [], [], 0, 0, 0
    for i, source in enumerate(drawn):
        verdicts = [grid.verdicts[i][t] for t in usable]
        if not grid.code_status[i].passed or any(v.status in ("timeout", "memory") for v in verdicts):
            dropped += 1
        elif all(v.passed for v in verdicts):
            equivalent += 1
        elif i in twins:
            twin += 1
        else:
            live.append(_program(problem, source))
            kinds.append(drawn[source])
    return LiveMutants(tuple(live), len(drawn), equivalent, dropped, twin, seconds, kinds=tuple(kinds))


def _twins(drawn: int, grid: ExecGrid, as_references: Sequence[ExecGrid]) -> set[int]:
    """The rows of the drawn mutants that give the same outcome as some evaluation mutant on every
    call whose reference oracle is usable. ``grid``: the reference's job, rows the ``drawn`` mutants
    then the evaluation mutants; ``as_references[k]``: evaluation mutant ``k`` as the reference of
    the drawn mutants, on the same calls. Same outcome: where the evaluation mutant returned a value,
    the drawn mutant returned an equal one (the sandbox's equality, decided on the trusted side);
    where it raised or ran out of a budget, the drawn mutant did the same (same exception type)."""
    calls = [c for c, o in enumerate(grid.oracle) if o.usable]
    found: set[int] = set()
    for k, own in enumerate(as_references):
        row = drawn + k
        if not grid.code_status[row].passed:
            continue
        for t in range(drawn):
            if t not in found and all(
                _same(grid.verdicts[row][c], grid.verdicts[t][c], own, t, c) for c in calls
            ):
                found.add(t)
    return found


def _same(evaluation: Verdict, training: Verdict, own: ExecGrid, t: int, c: int) -> bool:
    if evaluation.status in ("pass", "fail"):  # it returned a value: compare the values
        return own.oracle[c].usable and own.verdicts[t][c].passed
    return (training.status, training.reason) == (evaluation.status, evaluation.reason)


class MutantPool:
    """The live training mutants of every problem seen so far (the reference and its golden tests do
    not change during a run, so each problem is drawn and filtered once)."""

    def __init__(self, budget: int, seed: int, eval_mutants: int = EvalConfig.max_mutants) -> None:
        self.budget = budget
        self.seed = seed
        self.eval_mutants = eval_mutants
        """How many of the reference's first-order AST mutants evaluation counts (``eval.max_mutants``):
        the draw's twins are looked for among them."""
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
        todo: list[tuple[int, Problem, dict[str, str], list[GridJob], float]] = []
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
                drawn = draw_labelled_mutants(p.reference, self.budget, self.seed)
            except SyntaxError:
                out[i] = self._cache[key] = LiveMutants((), reason="the reference does not parse")
                continue
            if not drawn:
                out[i] = self._cache[key] = LiveMutants(
                    (), reason="no training mutant (docs/algorithm.md, D12)"
                )
                continue
            todo.append((i, p, drawn, self._jobs(p, list(drawn), tests), time.perf_counter() - start))
        if todo:
            start = time.perf_counter()
            jobs = [job for t in todo for job in t[3]]
            try:
                grids = runner.run_grids(jobs, rel_tol=rel_tol, abs_tol=abs_tol)
                if len(grids) != len(jobs):
                    raise RuntimeError(f"sandbox returned {len(grids)} grids for {len(jobs)} jobs")
            except Exception as e:  # noqa: BLE001 - the term is 0 this call, with the reason
                for i, *_ in todo:
                    out[i] = LiveMutants((), reason=f"sandbox: {type(e).__name__}: {e}")
                return [out[i] for i in range(len(problems))]
            share = (time.perf_counter() - start) / len(todo)
            at = 0
            for i, p, drawn, problem_jobs, own in todo:
                grid, as_references = grids[at], grids[at + 1 : at + len(problem_jobs)]
                at += len(problem_jobs)
                twins = _twins(len(drawn), grid, as_references)
                golden = len(_golden_tests(p))
                out[i] = self._cache[self._key(p)] = _judged(drawn, p, grid, golden, twins, own + share)
        return [out[i] for i in range(len(problems))]

    def _jobs(self, p: Problem, drawn: Sequence[str], golden: tuple[TestCase, ...]) -> list[GridJob]:
        """The filter's jobs of one problem: the reference's (rows: the drawn mutants, then the
        evaluation mutants; columns: the golden tests, then seeded extra calls of the same types),
        and one per evaluation mutant as the reference of the drawn mutants on the same calls."""
        evaluation = [m.source for m in generate_mutants(p.reference, limit=self.eval_mutants)]
        extra = extra_calls([t.call for t in golden], p.entry_point, f"{self.seed}\0{p.id}", EXTRA_PER_CALL)
        calls = golden + tuple(TestCase(call, "None") for call in extra)
        codes = tuple(_program(p, m) for m in drawn)
        # The question's helpers as in the scoring grid whose rows these mutants become; not its names
        # check: every code and reference here is the reference or one of its mutants.
        jobs = [problem_job(p, codes + tuple(_program(p, e) for e in evaluation), calls)]
        for k, e in enumerate(evaluation):
            jobs.append(problem_job(p, codes, calls, job_id=f"{p.id} (evaluation mutant {k})", reference=e))
        return [replace(j, question_names=None) for j in jobs]
