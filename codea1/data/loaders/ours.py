"""Rows in our own format: the form of ``Problem.to_dict``.

Required: ``id, question, entry_point, reference``; optional: ``golden_tests, imports, source,
harness, split, metadata``.
"""

from __future__ import annotations

from typing import Any

from codea1.data.rows import Issues
from codea1.types import Problem

COLUMNS = frozenset({"id", "question", "entry_point", "reference"})
"""The columns every row of our format has."""
OPTIONAL_COLUMNS = frozenset({"golden_tests", "imports", "source", "harness", "split", "metadata"})
"""The other columns our format knows."""


def _text(row: dict[str, Any], key: str, issues: Issues, *, required: bool = True) -> str:
    """``row[key]`` as a string; records an issue when it is missing (if required) or not a string."""
    value = row.get(key)
    if value is None:
        if required:
            issues.append((key, "missing"))
        return ""
    if not isinstance(value, str):
        issues.append((key, f"expected a string, got {type(value).__name__}"))
        return ""
    return value


def convert_ours(row: dict[str, Any], source: str = "") -> tuple[Problem | None, Issues]:
    """A row in the ``Problem.to_dict`` form."""
    issues: Issues = []
    tests = row.get("golden_tests") or []
    if isinstance(tests, str) or not isinstance(tests, (list, tuple)):
        issues.append(("golden_tests", "expected a list of strings"))
        tests = []
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, dict):
        issues.append(("metadata", "expected an object"))
        metadata = {}
    harness = row.get("harness")
    problem = Problem(
        id=_text(row, "id", issues),
        question=_text(row, "question", issues),
        entry_point=_text(row, "entry_point", issues),
        reference=_text(row, "reference", issues),
        golden_tests=tuple(tests),
        imports=_text(row, "imports", issues, required=False),
        source=source or _text(row, "source", issues, required=False),
        harness=harness if isinstance(harness, str) and harness else None,
        split=_text(row, "split", issues, required=False),
        metadata=dict(metadata),
    )
    return problem, issues
