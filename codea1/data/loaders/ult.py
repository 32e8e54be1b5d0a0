"""Rows of UnLeakedTestBench (ULT, arXiv 2508.00408) and PreLeakedTestBench: ``func_name, code,
task_id`` plus ``prompt`` and ``test_list``.

``code`` is the function under test, the ground truth; ``test_list`` holds example asserts that are
*not* a ground-truth suite (run against their own functions, 147 of ULT-Lite's 1,000 pass), so they
stay in ``metadata["example_tests"]`` and never become golden tests. The function runs under ULT's
import header (the modules its ``Ray/main.py`` prepends to every function): the standard-library
lines always, and ``numpy`` / ``pandas`` / ``pytest`` only for a function that names them, so a
program does not import pandas for nothing. Such third-party modules, and any other the function
imports, are listed in ``metadata["needs"]``; evaluation checks them against what its sandbox can
import and reports the functions it cannot run instead of scoring them 0.
"""

from __future__ import annotations

import ast
import sys
from typing import Any

from codea1.data.rows import Issues, parse_quietly, syntax_reason
from codea1.types import Problem

COLUMNS = frozenset({"func_name", "code", "task_id"})
"""The columns every ULT row has (``prompt`` and ``test_list`` are optional)."""
OPTIONAL_COLUMNS = frozenset({"prompt", "test_list"})
SOURCE = "ult"

STDLIB_HEADER = (
    "import os",
    "import re",
    "import math",
    "import random",
    "import string",
    "import warnings",
    "import datetime",
    "import traceback",
    "from typing import List, Dict, Any, Optional, Union, Tuple, Set, FrozenSet, Sequence, Iterable, "
    "Generator, Callable",
)
"""ULT's header lines of standard-library modules, in its order (``pytest`` left out: see below)."""
OPTIONAL_HEADER: dict[str, tuple[str, tuple[str, ...]]] = {
    "numpy": ("numpy", ("import numpy", "import numpy as np")),
    "np": ("numpy", ("import numpy", "import numpy as np")),
    "pandas": ("pandas", ("import pandas", "import pandas as pd")),
    "pd": ("pandas", ("import pandas", "import pandas as pd")),
    "pytest": ("pytest", ("import pytest",)),
}
"""Name a function uses → (the third-party module it needs, ULT's header lines that bind it)."""


def _free_names(tree: ast.Module) -> set[str]:
    """Every name the code reads (a superset of what it needs from the header: enough here)."""
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _imported_modules(tree: ast.Module) -> set[str]:
    """Top-level package of every ``import`` / ``from ... import`` anywhere in the code."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def header_and_needs(code: str) -> tuple[str, tuple[str, ...]]:
    """ULT's import header for ``code`` and the third-party modules it needs (sorted).

    A function that does not parse gets the standard-library header and no needs (the checks
    report the syntax error)."""
    try:
        tree = parse_quietly(code)
    except (SyntaxError, ValueError):
        return "\n".join(STDLIB_HEADER) + "\n", ()
    lines = list(STDLIB_HEADER)
    needs: set[str] = set()
    names = _free_names(tree)
    for name, (module, header) in OPTIONAL_HEADER.items():
        if name in names:
            needs.add(module)
            lines.extend(line for line in header if line not in lines)
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    needs.update(m for m in _imported_modules(tree) if stdlib and m not in stdlib)
    return "\n".join(lines) + "\n", tuple(sorted(needs))


def question_of(code: str, func_name: str, prompt: str) -> str:
    """The function's signature with ``prompt`` as its docstring (what a coder would be asked)."""
    try:
        tree = parse_quietly(code)
    except (SyntaxError, ValueError):
        return prompt
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func_name:
            node.body = [ast.Expr(ast.Constant(prompt.strip() or func_name))]
            return ast.unparse(node) + "\n"
    return prompt


def _tests(row: dict[str, Any], issues: Issues) -> list[str]:
    value = row.get("test_list")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        issues.append(("test_list", "expected a list of strings"))
        return []
    for i, test in enumerate(value):
        if reason := syntax_reason(test):
            issues.append((f"test_list[{i}]", f"does not parse ({reason})"))
    return list(value)


def convert_ult(row: dict[str, Any], source: str = "") -> tuple[Problem | None, Issues]:
    """One ULT / PreLeakedTestBench row (``func_name, code, task_id[, prompt, test_list]``)."""
    issues: Issues = []
    task_id = row.get("task_id")
    if isinstance(task_id, bool) or not isinstance(task_id, (str, int)) or not str(task_id).strip():
        issues.append(("task_id", "missing (expected a string or an integer)"))
        task_id = ""
    texts: dict[str, str] = {}
    for key in ("func_name", "code", "prompt"):
        value = row.get(key)
        if value is None and key == "prompt":
            value = ""
        if not isinstance(value, str):
            issues.append(
                (key, "missing" if value is None else f"expected a string, got {type(value).__name__}")
            )
            value = ""
        texts[key] = value
    code, func_name = texts["code"], texts["func_name"]
    header, needs = header_and_needs(code)
    tests = _tests(row, issues)
    problem = Problem(
        id=f"ult/{task_id}" if task_id != "" else "",
        question=question_of(code, func_name, texts["prompt"]) if code.strip() else "",
        entry_point=func_name,
        reference=f"{header}\n\n{code.strip(chr(10))}\n" if code.strip() else "",
        imports=header,
        source=source or SOURCE,
        metadata={"task_id": str(task_id), "function": code, "example_tests": tests, "needs": list(needs)},
    )
    return problem, issues
