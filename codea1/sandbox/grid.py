"""GridJob → ExecGrid: planning program tasks (deduplicated by content) and judging their outcomes.

Two phases. The oracle phase runs each distinct reference once with every distinct call and
predicted expression of its tests. The candidate phase runs each distinct (code, entry point) once
with the distinct calls whose oracle is usable. Identical (program, expression) pairs are
evaluated once per call of :func:`Sandbox.run_grids`; verdicts are decided here, on the trusted
side, with :func:`codea1.sandbox.equality.values_equal`. A test whose oracle value holds a value
with no inspectable state (an ``Opaque``) is ``uncomparable``: no candidate can pass or fail it. The
decision rests on the reference's value alone, so a candidate cannot dodge a test by returning an
opaque value (against a comparable oracle that is a ``fail``). Programs with many expressions are
split into chunks so that a slow row spreads over several workers.

A test judges behaviour only (docs/sandbox.md, "Tests judge behaviour only"): the oracle phase
refuses, unrun, a call that inspects or patches (:mod:`codea1.sandbox.test_guard`) or uses a name
only the reference defines (:mod:`codea1.sandbox.test_names`), and runs each call that does more
than call the entry point on literals once more, on the reference's behaviour-preserving variant in
a shifted heap (:mod:`codea1.sandbox.reference_variant`): a usable oracle whose call gives another
value there is ``invalid`` (:data:`VARIANT_DIFFERS`). Each task carries its job's
``question_helpers``, whose names every test of it calls in place of the program's (a program is
one task per distinct source, entry point and question helpers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from codea1.config import SandboxConfig
from codea1.sandbox.equality import contains_opaque, values_equal
from codea1.sandbox.reference_variant import calls_on_literals, variant
from codea1.sandbox.tasks import ExprOutcome, ProgramOutcome, ProgramTask
from codea1.sandbox.test_guard import refusal
from codea1.sandbox.test_names import foreign_name, reference_only
from codea1.types import ExecGrid, GridJob, OracleVerdict, Verdict

CHUNK = 64
"""Most expressions evaluated by one program process."""
NO_STATE = "value has no inspectable state"
"""Reason given when a value is (or holds) an ``Opaque``: an uncomparable oracle, a failed prediction
or a failed candidate value."""
VARIANT_DIFFERS = (
    "test outcome differs on a behaviour-preserving variant of the reference "
    "(it depends on the program's text, bytecode or memory addresses)"
)
"""Reason of a test whose call gave another outcome on the reference's variant."""
_Key = tuple[str, str, str]  # (program source, entry point, question helpers)
_GuardKey = tuple[str, str, "frozenset[str] | None", str]  # (reference, entry point, question names, call)


@dataclass
class TaskPlan:
    """Distinct programs → tasks, and where each (program, expression) landed."""

    tasks: list[ProgramTask] = field(default_factory=list)
    locate: dict[tuple[_Key, str], tuple[int, int]] = field(default_factory=dict)
    first_task: dict[_Key, int] = field(default_factory=dict)
    refused: dict[_GuardKey, str] = field(default_factory=dict)
    """(reference, entry point, question names, call) → why the test does not judge behaviour only
    (:mod:`codea1.sandbox.test_guard`, :mod:`codea1.sandbox.test_names`); such tests are not run."""
    variants: dict[_Key, _Key] = field(default_factory=dict)
    """Reference → its behaviour-preserving variant (:mod:`codea1.sandbox.reference_variant`), run
    in a shifted heap with the calls that do more than call the entry point on literals."""


@dataclass(frozen=True)
class OracleResult:
    """Per job: one verdict per test, and the oracle value outcome of each usable test."""

    verdicts: list[tuple[OracleVerdict, ...]]
    values: list[tuple[ExprOutcome | None, ...]]


def _plan(
    programs: dict[_Key, list[str]], cfg: SandboxConfig, shifted: frozenset[_Key] = frozenset()
) -> TaskPlan:
    plan = TaskPlan()
    for key, exprs in programs.items():
        chunks = [exprs[i : i + CHUNK] for i in range(0, len(exprs), CHUNK)] or [[]]
        plan.first_task[key] = len(plan.tasks)
        for chunk in chunks:
            for j, expr in enumerate(chunk):
                plan.locate[(key, expr)] = (len(plan.tasks), j)
            plan.tasks.append(
                ProgramTask.make(
                    key[0], key[1], tuple(chunk), cfg, shift_heap=key in shifted, question_helpers=key[2]
                )
            )
    return plan


def _add(programs: dict[_Key, list[str]], seen: set[tuple[_Key, str]], key: _Key, expr: str) -> None:
    programs.setdefault(key, [])
    if (key, expr) not in seen:
        seen.add((key, expr))
        programs[key].append(expr)


def refused_by_scope(verdict: OracleVerdict) -> bool:
    """True when the oracle is ``invalid`` because of the test itself under the test-scope rules
    (refused before running, a state change, another outcome on the variant: every such reason
    starts with "test "), not because of a budget or a reference that did not load."""
    return verdict.status == "invalid" and verdict.reason.startswith("test ")


def guard_key(job: GridJob, call: str) -> _GuardKey:
    """What decides whether the planner refuses ``call`` in ``job``."""
    return (job.reference, job.entry_point, job.question_names, call)


def plan_oracle(jobs: Sequence[GridJob], cfg: SandboxConfig) -> TaskPlan:
    """One task (or chunk) per distinct reference, with the distinct calls and predictions of its
    tests; a test whose call does not judge behaviour only, or uses a name only the reference
    defines, is refused, not run. Each call that does more than call the entry point on literals
    also runs on the reference's behaviour-preserving variant, in a shifted heap."""
    programs: dict[_Key, list[str]] = {}
    seen: set[tuple[_Key, str]] = set()
    refused: dict[_GuardKey, str] = {}
    own: dict[tuple[str, str, frozenset[str]], frozenset[str]] = {}
    variants: dict[_Key, _Key | None] = {}
    for job in jobs:
        key = (job.reference, job.entry_point, job.question_helpers)
        programs.setdefault(key, [])
        if key not in variants:
            text = variant(job.reference)
            variants[key] = (text, job.entry_point, job.question_helpers) if text is not None else None
        for test in job.tests:
            gk = guard_key(job, test.call)
            if gk not in refused:
                why = refusal(test.call, job.entry_point)
                if not why and job.question_names is not None:
                    names_key = (job.reference, job.entry_point, job.question_names)
                    if names_key not in own:
                        own[names_key] = reference_only(job.reference, job.entry_point, job.question_names)
                    why = foreign_name(test.call, own[names_key])
                refused[gk] = why
            if refused[gk]:
                continue
            _add(programs, seen, key, test.call)
            _add(programs, seen, key, test.predicted)
            vkey = variants[key]
            if vkey is not None and not calls_on_literals(test.call, job.entry_point):
                _add(programs, seen, vkey, test.call)
    shifted = frozenset(v for v in variants.values() if v is not None)
    plan = _plan(programs, cfg, shifted)
    plan.refused = {k: v for k, v in refused.items() if v}
    plan.variants = {k: v for k, v in variants.items() if v is not None and v in programs}
    return plan


def _lookup(plan: TaskPlan, outcomes: Sequence[ProgramOutcome], key: _Key, expr: str) -> ExprOutcome | str:
    """The expression's outcome, or the load failure text when its program did not load."""
    t, j = plan.locate[(key, expr)]
    out = outcomes[t]
    if out.load_status != "pass":
        return f"{out.load_status}: {out.load_reason}" if out.load_reason else out.load_status
    return out.exprs[j]


def _same_on_variant(call: ExprOutcome, other: ExprOutcome | str | None, rel: float, abs_: float) -> bool:
    """The call's outcome on the variant (None: not run there; a str: the variant did not load, so
    nothing is known) is the same value as on the reference."""
    if other is None or isinstance(other, str):
        return True
    return other.kind == "value" and values_equal(call.value, other.value, rel, abs_)


def _judge_oracle(call: ExprOutcome, pred: ExprOutcome | str, rel: float, abs_: float) -> OracleVerdict:
    if call.kind != "value":
        if call.kind == "unencodable":
            return OracleVerdict("invalid", "unencodable value")
        return OracleVerdict(
            "invalid", call.reason or call.kind if call.kind in ("raise", "error") else call.kind
        )
    if contains_opaque(call.value):
        return OracleVerdict("uncomparable", NO_STATE)
    if isinstance(pred, str):
        return OracleVerdict("wrong_prediction", f"prediction did not run: {pred}")
    if pred.kind != "value":
        return OracleVerdict("wrong_prediction", f"prediction {pred.kind}: {pred.reason}".rstrip(": "))
    if values_equal(pred.value, call.value, rel, abs_):  # the reference's value is the expected one
        return OracleVerdict("valid")
    return OracleVerdict(
        "wrong_prediction", f"prediction {NO_STATE}" if contains_opaque(pred.value) else "prediction differs"
    )


def oracle_verdicts(
    jobs: Sequence[GridJob],
    plan: TaskPlan,
    outcomes: Sequence[ProgramOutcome],
    rel_tol: float,
    abs_tol: float,
) -> OracleResult:
    """Judge every test against its reference's outcomes."""
    verdicts: list[tuple[OracleVerdict, ...]] = []
    values: list[tuple[ExprOutcome | None, ...]] = []
    for job in jobs:
        key = (job.reference, job.entry_point, job.question_helpers)
        row_v: list[OracleVerdict] = []
        row_x: list[ExprOutcome | None] = []
        vkey = plan.variants.get(key)
        for test in job.tests:
            why = plan.refused.get(guard_key(job, test.call))
            if why:
                row_v.append(OracleVerdict("invalid", why))
                row_x.append(None)
                continue
            call = _lookup(plan, outcomes, key, test.call)
            if isinstance(call, str):
                row_v.append(OracleVerdict("invalid", f"reference did not load ({call})"))
                row_x.append(None)
                continue
            verdict = _judge_oracle(call, _lookup(plan, outcomes, key, test.predicted), rel_tol, abs_tol)
            if verdict.usable and vkey is not None and (vkey, test.call) in plan.locate:
                if not _same_on_variant(call, _lookup(plan, outcomes, vkey, test.call), rel_tol, abs_tol):
                    verdict = OracleVerdict("invalid", VARIANT_DIFFERS)
            row_v.append(verdict)
            row_x.append(call if verdict.usable else None)
        verdicts.append(tuple(row_v))
        values.append(tuple(row_x))
    return OracleResult(verdicts, values)


def plan_codes(jobs: Sequence[GridJob], oracle: OracleResult, cfg: SandboxConfig) -> TaskPlan:
    """One task (or chunk) per distinct code, with the distinct calls whose oracle is usable."""
    programs: dict[_Key, list[str]] = {}
    seen: set[tuple[_Key, str]] = set()
    for job, values in zip(jobs, oracle.values, strict=True):
        for code in job.codes:
            key = (code, job.entry_point, job.question_helpers)
            programs.setdefault(key, [])
            for test, value in zip(job.tests, values, strict=True):
                if value is not None:
                    _add(programs, seen, key, test.call)
    return _plan(programs, cfg)


def _judge_candidate(got: ExprOutcome, want: Any, rel: float, abs_: float) -> Verdict:
    if got.kind == "value":
        if values_equal(got.value, want, rel, abs_):
            return Verdict("pass")
        return Verdict("fail", NO_STATE if contains_opaque(got.value) else "")
    if got.kind == "raise":
        return Verdict("error", got.reason)
    if got.kind in ("timeout", "memory"):
        return Verdict(got.kind, got.reason)
    if got.kind == "unencodable":
        return Verdict("fail", "unencodable value")
    return Verdict("error", got.reason)


def _code_status(out: ProgramOutcome) -> Verdict:
    if out.load_status == "pass":
        return Verdict("pass")
    return Verdict(out.load_status, out.load_reason)


def assemble(
    jobs: Sequence[GridJob],
    oracle: OracleResult,
    plan: TaskPlan,
    outcomes: Sequence[ProgramOutcome],
    rel_tol: float,
    abs_tol: float,
) -> list[ExecGrid]:
    """Build one :class:`ExecGrid` per job from the oracle and candidate outcomes."""
    grids: list[ExecGrid] = []
    for job, o_verdicts, o_values in zip(jobs, oracle.verdicts, oracle.values, strict=True):
        statuses: list[Verdict] = []
        rows: list[tuple[Verdict, ...]] = []
        for code in job.codes:
            key = (code, job.entry_point, job.question_helpers)
            status = _code_status(outcomes[plan.first_task[key]])
            statuses.append(status)
            row: list[Verdict] = []
            for test, ov, value in zip(job.tests, o_verdicts, o_values, strict=True):
                if not status.passed:
                    row.append(Verdict("invalid", "code did not load"))
                elif value is None:
                    row.append(Verdict("invalid", f"oracle {ov.status}: {ov.reason}".rstrip(": ")))
                else:
                    got = _lookup(plan, outcomes, key, test.call)
                    if isinstance(got, str):
                        row.append(Verdict("invalid", "code did not load"))
                    else:
                        row.append(_judge_candidate(got, value.value, rel_tol, abs_tol))
            rows.append(tuple(row))
        grids.append(ExecGrid(job.id, o_verdicts, tuple(statuses), tuple(rows)))
    return grids
