"""Rows of KodCode-V1 (``question_id, question, solution, test, test_info, gpt_difficulty, subset, style``).

Golden tests are the pytest functions of the ``test`` column, each made runnable on its own. Where
the rows come from (the hub, through ``datasets``): ``codea1.data.hub``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any

from codea1.data.rows import DataError, Issues, LoadedRow, imports_of, parse_quietly
from codea1.types import Problem

KODCODE_REPO = "KodCode/KodCode-V1"
KODCODE_DIFFICULTIES = ("easy", "medium", "hard", "all")
"""Values of ``kodcode:<difficulty>`` (KodCode-V1's ``gpt_difficulty``, or ``all``)."""


def pytest_golden_tests(test_module: str) -> tuple[str, ...]:
    """Each argument-free, undecorated ``test_*`` function as a standalone snippet that calls itself.

    The module's other top-level statements (imports, helpers) are kept in front of each snippet,
    except ``from solution import ...`` / ``import solution``: the reference is already in scope.
    """
    try:
        tree = parse_quietly(test_module)
    except (SyntaxError, ValueError):
        return ()
    prelude: list[str] = []
    tests: list[ast.FunctionDef] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            tests.append(node)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "solution":
            continue
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "solution" for a in node.names):
            continue
        else:
            prelude.append(ast.unparse(node))
    head = "\n".join(prelude)
    out: list[str] = []
    for fn in tests:
        args = fn.args
        if fn.decorator_list or args.args or args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg:
            continue
        if any(isinstance(n, ast.Name) and n.id == "solution" for n in ast.walk(fn)):
            continue
        body = (
            f"{head}\n\n{ast.unparse(fn)}\n\n{fn.name}()\n" if head else f"{ast.unparse(fn)}\n\n{fn.name}()\n"
        )
        out.append(body)
    return tuple(out)


def convert_kodcode(row: dict[str, Any]) -> tuple[Problem, Issues]:
    """One KodCode-V1 row (``question_id, question, solution, test, test_info, gpt_difficulty, subset, style``)."""
    issues: Issues = []
    info = row.get("test_info") or []
    names = [t.get("function_name") for t in info if isinstance(t, dict) and t.get("function_name")]
    entry_point = names[0] if names else ""
    if not entry_point:
        issues.append(("test_info", "no function_name"))
    solution = row.get("solution") if isinstance(row.get("solution"), str) else ""
    problem = Problem(
        id=str(row.get("question_id") or ""),
        question=row.get("question") if isinstance(row.get("question"), str) else "",
        entry_point=entry_point,
        reference=solution,
        golden_tests=pytest_golden_tests(row.get("test") or ""),
        imports=imports_of(solution),
        source="kodcode",
        metadata={
            "difficulty": row.get("gpt_difficulty") or "",
            "subset": row.get("subset") or "",
            "style": row.get("style") or "",
        },
    )
    return problem, issues


def kodcode_rows(
    dataset: Any, *, difficulty: str = "hard", limit: int = 0, file: str = KODCODE_REPO
) -> list[LoadedRow]:
    """Rows of a KodCode-V1 split (a ``datasets.Dataset`` or a list of dicts) with the given difficulty.

    ``difficulty`` ``all`` keeps every row; ``limit`` > 0 stops after that many kept rows.
    """
    column = "gpt_difficulty"
    if hasattr(dataset, "column_names"):
        if column not in dataset.column_names:
            raise DataError(f"{file}: no {column!r} column (columns: {', '.join(dataset.column_names)})")
        keep = [i for i, d in enumerate(dataset[column]) if difficulty == "all" or d == difficulty]
        if limit > 0:
            keep = keep[:limit]
        indexed: Iterable[tuple[int, dict[str, Any]]] = zip(keep, dataset.select(keep), strict=True)
    else:
        indexed = (
            (i, r) for i, r in enumerate(dataset) if difficulty == "all" or r.get(column) == difficulty
        )
    out: list[LoadedRow] = []
    for i, row in indexed:
        problem, issues = convert_kodcode(row)
        out.append(LoadedRow(file, i + 1, problem, issues))
        if limit > 0 and len(out) >= limit:
            break
    return out
