"""Rows in the reference implementation's (verl-style) parquet layouts.

* Training rows: ``prompt`` (chat messages), ``GT_code`` (full reference), ``clean_description``
  (question text), ``GT_test`` (golden test snippets), ``extra_info.question_id``, ``data_source``.
* The evalplus validation parquet (HumanEval+ / MBPP+): ``problem`` (signature + docstring),
  ``GT_code`` (for HumanEval+ only the function *body*), ``test`` (an evalplus-style harness defining
  ``check(candidate)``), ``extra_info`` {``function_name``, ``imports``, ``question_id``}.

References are made self-contained: the row's imports are prepended when missing.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from codea1.data.rows import Issues, defines, parse_quietly, with_imports
from codea1.types import Problem


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _extra(row: dict[str, Any]) -> dict[str, Any]:
    extra = row.get("extra_info")
    return extra if isinstance(extra, dict) else {}


def convert_evalplus_parquet(row: dict[str, Any], source: str = "") -> tuple[Problem | None, Issues]:
    """A HumanEval+ / MBPP+ row of the evalplus parquet; the HumanEval+ body is rebuilt into a function."""
    issues: Issues = []
    extra = _extra(row)
    entry_point = _str(extra.get("function_name"))
    if not entry_point:
        issues.append(("extra_info.function_name", "missing"))
    imports = _str(extra.get("imports"))
    question = _str(row.get("problem"))
    body = _str(row.get("GT_code"))
    if not body.strip():
        reference = ""
    elif entry_point and not defines(body, entry_point) and question:
        reference = question.rstrip("\n") + "\n" + body.lstrip("\n")
        if not defines(reference, entry_point):  # a body without a trailing newline on the docstring
            reference = question + body
    else:
        reference = body
    harness = row.get("test")
    problem = Problem(
        id=_str(extra.get("question_id")),
        question=question,
        entry_point=entry_point,
        reference=with_imports(reference, imports) if reference.strip() else "",
        imports=imports,
        source=source or _str(row.get("data_source")),
        harness=harness if isinstance(harness, str) and harness.strip() else None,
        metadata={"function_declaration": _str(extra.get("function_declaration"))},
    )
    return problem, issues


def question_from_prompt(prompt: Any) -> str:
    """The question inside chat messages: the last user message, after ``Question:`` when present."""
    if isinstance(prompt, str):
        text = prompt
    else:
        users = [m.get("content") for m in (prompt or []) if isinstance(m, dict) and m.get("role") == "user"]
        text = _str(users[-1]) if users else ""
    marker = text.find("Question:")
    return text[marker + len("Question:") :].lstrip("\n") if marker >= 0 else text


def infer_entry_point(reference: str, question: str) -> str:
    """The function the question asks for: the only top-level definition, or the only one it mentions."""
    try:
        tree = parse_quietly(reference)
    except (SyntaxError, ValueError):
        return ""
    defs = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    if len(defs) == 1:
        return defs[0]
    mentioned = [d for d in defs if re.search(rf"\b{re.escape(d)}\b", question)]
    return mentioned[0] if len(mentioned) == 1 else ""


def _golden_tests(value: Any, issues: Issues) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value.strip() else ()
    try:
        items = list(value)
    except TypeError:
        issues.append(("GT_test", f"expected a list of strings, got {type(value).__name__}"))
        return ()
    if not all(isinstance(t, str) for t in items):
        issues.append(("GT_test", "expected a list of strings"))
        return ()
    return tuple(items)


def convert_reference(row: dict[str, Any], source: str = "") -> tuple[Problem | None, Issues]:
    """A training row of the reference implementation (``GT_code``, ``clean_description``, ...)."""
    issues: Issues = []
    extra = _extra(row)
    pid = _str(extra.get("question_id")) or _str(row.get("question_id")) or _str(row.get("id"))
    if not pid:
        issues.append(("extra_info.question_id", "missing"))
    question = (
        _str(row.get("clean_description"))
        or _str(row.get("problem"))
        or question_from_prompt(row.get("prompt"))
    )
    imports = _str(extra.get("imports"))
    code = _str(row.get("GT_code"))
    if not code.strip():
        issues.append(("GT_code", "missing"))
    entry_point = _str(extra.get("function_name")) or _str(row.get("entry_point"))
    if not entry_point and code.strip():
        entry_point = infer_entry_point(code, question)
        if not entry_point:
            issues.append(
                ("extra_info.function_name", "missing, and the entry point cannot be inferred from GT_code")
            )
    harness = row.get("test")
    problem = Problem(
        id=pid,
        question=question,
        entry_point=entry_point,
        reference=with_imports(code, imports) if code.strip() else "",
        golden_tests=_golden_tests(row.get("GT_test"), issues),
        imports=imports,
        source=source or _str(row.get("data_source")) or "reference",
        harness=harness if isinstance(harness, str) and "def check(" in harness else None,
    )
    return problem, issues
