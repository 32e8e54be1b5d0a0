"""``demo:easy-heldout2``: the second held-out set of one-line problems (docs/data.md, docs/LOG.md 2026-12-07).

It exists to resolve a 10-point tester difference on problems no training run saw, so it must hold at
least 60 problems, share nothing with ``demo:easy`` (ids, entry points, function bodies), and every
reference must pass its harness in the sandbox while a wrong candidate fails it.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
from pathlib import Path
from types import ModuleType

from codea1.config import SandboxConfig
from codea1.data.problems import load_problems
from codea1.eval.code_eval import with_golden_harness
from codea1.eval.mutants import generate_mutants
from codea1.sandbox.local import Sandbox
from codea1.types import CheckJob, Problem

HELDOUT2 = load_problems("demo:easy-heldout2")
EASY = load_problems("demo:easy")


def _body(problem: Problem) -> list[ast.stmt]:
    """The statements of the entry point's body."""
    (fn,) = (n for n in ast.parse(problem.reference).body if isinstance(n, ast.FunctionDef))
    return fn.body


def _source(problem: Problem) -> str:
    """The entry point's body as normalised source: the function, whatever its name."""
    return "\n".join(ast.unparse(s) for s in _body(problem))


def _load_script(name: str) -> ModuleType:
    """A script of ``scripts/`` as a module (its ``main`` does not run)."""
    path = Path(__file__).resolve().parents[2] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_body_shape = _load_script("make_easy_problems").body_shape
"""The rule the split was shipped with (``--ship`` drops a variant of a demo:easy function)."""


def _shape(problem: Problem) -> str:
    """Equal for two functions with the same argument and return types whose bodies differ only in
    names, constants and operators: a variant (``2 * x`` and ``3 * n``, ``a + b`` and ``a - b``)."""
    return _body_shape(problem.reference)


def test_split_size_shape_and_screened_band() -> None:
    assert len(HELDOUT2) >= 60
    assert len({p.id for p in HELDOUT2}) == len(HELDOUT2)
    assert {p.split for p in HELDOUT2} == {"easy-heldout2"} and {p.source for p in HELDOUT2} == {"demo"}
    for p in HELDOUT2:
        assert p.question.startswith(f"def {p.entry_point}(") and ">>>" in p.question
        assert len(p.golden_tests) >= 4
        assert 0.25 <= p.metadata["pass_rate"] <= 0.75  # kept by the screen (1 or 2 of 4 samples)
        # the shipped harness is the one built from the golden tests: neither can drift from the other
        assert p.harness == with_golden_harness(dataclasses.replace(p, harness=None)).harness


def test_nothing_shared_with_demo_easy() -> None:
    assert not {p.id for p in HELDOUT2} & {p.id for p in EASY}
    assert not {p.entry_point for p in HELDOUT2} & {p.entry_point for p in EASY}
    assert not {_source(p) for p in HELDOUT2} & {_source(p) for p in EASY}
    assert len({_source(p) for p in HELDOUT2}) == len(HELDOUT2)
    assert not {_shape(p) for p in HELDOUT2} & {
        _shape(p) for p in EASY
    }  # no variant: not "triple" by "double"


def test_shape_tells_a_variant_from_a_new_function() -> None:
    by_name = {p.entry_point: p for p in EASY}
    double, is_zero = by_name["double"], by_name["is_zero"]
    triple = dataclasses.replace(double, reference="def triple(n: int) -> int:\n    return 3 * n\n")
    add = by_name["add"]
    subtract = dataclasses.replace(add, reference="def subtract(a: int, b: int) -> int:\n    return a - b\n")
    bang = dataclasses.replace(double, reference="def bang(s: str) -> str:\n    return '!' + s\n")
    assert _shape(triple) == _shape(double) and _shape(subtract) == _shape(add)
    assert _shape(bang) != _shape(double) and _shape(triple) != _shape(is_zero)


def test_references_pass_and_a_wrong_candidate_fails_in_the_sandbox() -> None:
    jobs = [CheckJob(p.id, p.reference, p.entry_point, p.harness, 10.0) for p in HELDOUT2]
    wrong = [
        CheckJob(
            f"{p.id}/none",
            f"def {p.entry_point}(*args, **kwargs):\n    return None\n",
            p.entry_point,
            p.harness,
            10.0,
        )
        for p in HELDOUT2
    ]
    sandbox = Sandbox(SandboxConfig(workers=1))
    try:
        verdicts = sandbox.run_checks(jobs + wrong)
    finally:
        sandbox.close()
    failed = [
        (j.id, v.status) for j, v in zip(jobs, verdicts[: len(jobs)], strict=True) if v.status != "pass"
    ]
    assert not failed, failed
    passed_wrong = [j.id for j, v in zip(wrong, verdicts[len(jobs) :], strict=True) if v.status == "pass"]
    assert not passed_wrong, passed_wrong


def test_golden_tests_kill_first_order_mutants() -> None:
    """Every problem has a mutant besides ``return None`` (which any valid test kills), and its own
    asserts kill one such (trusted data, run in process)."""
    for p in HELDOUT2:
        mutants = [m for m in generate_mutants(p.reference) if m.kind != "return"]
        killed = 0
        for m in mutants:
            ns: dict = {}
            try:
                exec(m.source, ns)
                for test in p.golden_tests:
                    exec(test, ns)
            except Exception:
                killed += 1
        assert killed >= 1, (p.id, len(mutants))
