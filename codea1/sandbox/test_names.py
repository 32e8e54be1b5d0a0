"""Which names a generated test may use: the question's own, never what only the reference defines.

A test's call expression runs in the reference's program and in each candidate's. A name that the
reference defines but the question does not (a helper of the reference solution, a module only it
imports) exists in the oracle's process and in no candidate that was written differently:
``f(helper(1))`` is valid on the reference and a ``NameError`` on every other correct candidate,
which pays the tester for nothing the function does. The grid planner refuses such a test before
it runs (:func:`foreign_name`, :func:`reference_only`), with the names the question itself provides
(:func:`question_names`) passed in the job (``GridJob.question_names``).

The question's own names are the top-level names its Python text defines (a HumanEval-style prompt:
the signature, the helpers it gives, its imports; a prompt ending in a docstring is read with a
``pass`` body; a prose question contributes the names of its fenced Python blocks) and the names the
problem's ``imports`` bind, which every candidate program starts with.

The question's own helpers also reach the test from a trusted copy (:func:`helper_source`): the
problem's imports and the question's imports and helper functions, as source the worker executes
apart from the program, so that a test's ``is_sorted(f(x))`` runs the question's ``is_sorted``
whatever the candidate defined under that name (:mod:`codea1.sandbox.worker.test_scope`).
:func:`problem_job` builds a problem's job with both.
"""

from __future__ import annotations

import ast
import functools
import re
import warnings
from collections.abc import Sequence

from codea1.types import GridJob, Problem, TestCase

_FENCE = re.compile(r"```[ \t]*(?:python3?|py3?)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def _parse(code: str) -> ast.Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def bound_names(tree: ast.Module) -> set[str]:
    """Every name a module binds at its top level: functions, classes, assignment, ``for``,
    ``with`` and walrus targets, and imports (``import a.b`` binds ``a``), outside function and
    class bodies (``global`` names of a function body included)."""
    names: set[str] = set()
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            names.update(n for g in ast.walk(node) if isinstance(g, ast.Global) for n in g.names)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        if isinstance(node, ast.Lambda):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return names


def question_names(problem: Problem) -> frozenset[str]:
    """The names a test of ``problem`` may use besides builtins and the entry point: what the
    question's Python defines and what the problem's imports bind (module docstring)."""
    return _question_scope(problem.question or "", problem.imports or "", problem.entry_point)[0]


def helper_source(problem: Problem) -> str:
    """The question's own helpers as trusted source (``GridJob.question_helpers``): the problem's
    imports, then the question's top-level imports and function definitions in order, leaving out
    the entry point and stubs (a body of only a docstring, ``pass``, ``...`` or
    ``raise NotImplementedError``: the task itself, not a helper). Classes and other top-level
    statements are left out: they stay the program's. "" when there is none."""
    return _question_scope(problem.question or "", problem.imports or "", problem.entry_point)[1]


def problem_job(
    problem: Problem,
    codes: Sequence[str],
    tests: Sequence[TestCase],
    *,
    job_id: str | None = None,
    reference: str | None = None,
) -> GridJob:
    """The grid job of ``problem``: ``codes`` (complete programs) against ``tests`` under its reference
    (or ``reference``, e.g. a mutant standing in for it), with the question's names
    (:func:`question_names`) and helpers (:func:`helper_source`)."""
    names, helpers = _question_scope(problem.question or "", problem.imports or "", problem.entry_point)
    return GridJob(
        problem.id if job_id is None else job_id,
        problem.reference if reference is None else reference,
        problem.entry_point,
        tuple(codes),
        tuple(tests),
        names,
        helpers,
    )


@functools.lru_cache(maxsize=4096)
def _question_scope(question: str, imports: str, entry_point: str) -> tuple[frozenset[str], str]:
    """(names, helper source) of a question: parsed once per distinct question (scoring asks each step)."""
    tree = _parse(question) or _parse(question.rstrip() + "\n    pass\n")
    trees = [tree] if tree is not None else [_parse(block) for block in _FENCE.findall(question)]
    imports_tree = _parse(imports)
    names: set[str] = set()
    helpers: list[str] = []
    for t in (*trees, imports_tree):
        if t is not None:
            names |= bound_names(t)
    for t in (imports_tree, *trees):
        for node in t.body if t is not None else ():
            if isinstance(node, ast.Import | ast.ImportFrom):
                if all(a.name != "*" for a in node.names):
                    helpers.append(ast.unparse(node))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if node.name != entry_point and not _stub(node):
                    helpers.append(ast.unparse(node))
    return frozenset(names), "\n\n".join(helpers) + "\n" if helpers else ""


def _stub(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A definition whose body is only a docstring, ``pass``, ``...`` or ``raise NotImplementedError``."""
    for stmt in node.body:
        if isinstance(stmt, ast.Pass) or (
            isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        ):
            continue
        if isinstance(stmt, ast.Raise) and stmt.exc is not None:
            exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                continue
        return False
    return True


def reference_only(reference: str, entry_point: str, allowed: frozenset[str]) -> frozenset[str]:
    """The names bound at the reference's top level that are neither the entry point nor in
    ``allowed`` (the question's names)."""
    ref = _parse(reference)
    return frozenset(bound_names(ref) - allowed - {entry_point}) if ref is not None else frozenset()


def foreign_name(call: str, own: frozenset[str]) -> str:
    """Why ``call`` uses a name only the reference defines ("" when it uses none of ``own``, the
    :func:`reference_only` names)."""
    test = _parse_expr(call) if own else None
    for node in ast.walk(test) if test is not None else ():
        if isinstance(node, ast.Name) and node.id in own:
            return f"test uses {node.id}, which only the reference defines (not the question)"
    return ""


def _parse_expr(call: str) -> ast.Expression | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(call, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
