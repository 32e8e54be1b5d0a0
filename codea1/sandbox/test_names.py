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
"""

from __future__ import annotations

import ast
import re
import warnings

from codea1.types import Problem

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
    names: set[str] = set()
    text = problem.question or ""
    tree = _parse(text) or _parse(text.rstrip() + "\n    pass\n")
    sources = [tree] if tree is not None else [_parse(block) for block in _FENCE.findall(text)]
    sources.append(_parse(problem.imports or ""))
    for t in sources:
        if t is not None:
            names |= bound_names(t)
    return frozenset(names)


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
