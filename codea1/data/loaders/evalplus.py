"""Rows of evalplus's own JSONL (``HumanEvalPlus.jsonl`` / ``MbppPlus.jsonl``).

A row holds ``task_id, prompt, canonical_solution, entry_point`` plus ``base_input``/``plus_input``
or a HumanEval-style ``test``. For rows with inputs, the harness embeds the reference and compares
the candidate's output with the reference's on every input (evalplus-style float tolerance), since
the JSONL holds no expected outputs. Otherwise a HumanEval-style ``test`` defining
``check(candidate)`` is used. Where the built-in names find these files: ``codea1.data.sources``.
"""

from __future__ import annotations

import ast
from typing import Any

from codea1.data.rows import Issues, defines, imports_of, parse_quietly, with_imports
from codea1.types import Problem

HARNESS_TEMPLATE = """import copy
import math

# The reference solution; expected outputs are computed from it at check time.
{reference}

_REFERENCE = {entry_point}
inf, nan = float("inf"), float("nan")  # repr() of non-finite floats in the inputs
_INPUTS = {inputs}
_ATOL = {atol!r}


def _close(out, exp, atol):
    if isinstance(exp, float) or isinstance(out, float):
        if not isinstance(out, (int, float)) or isinstance(out, bool):
            return False
        if math.isnan(exp) and math.isnan(out):
            return True
        return math.isclose(out, exp, rel_tol=1e-07, abs_tol=max(atol, 1e-06))
    if isinstance(exp, (list, tuple)) and isinstance(out, (list, tuple)) and type(out) is type(exp):
        return len(out) == len(exp) and all(_close(o, e, atol) for o, e in zip(out, exp))
    return out == exp


def check(candidate):
    for args in _INPUTS:
        expected = _REFERENCE(*copy.deepcopy(args))
        out = candidate(*copy.deepcopy(args))
        assert _close(out, expected, _ATOL), f"input {{args!r}}: got {{out!r}}, expected {{expected!r}}"
"""


def _question(prompt: str, reference: str, entry_point: str) -> str:
    """HumanEval+ prompts are already signature + docstring; MBPP+ prompts are only the docstring."""
    if defines(prompt + "\n    pass\n", entry_point) or f"def {entry_point}" in prompt:
        return prompt
    try:
        tree = parse_quietly(reference)
    except (SyntaxError, ValueError):
        return prompt
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            signature = ast.unparse(node).splitlines()[0]
            imports = imports_of(reference)
            head = f"{imports}\n\n" if imports else ""
            return f"{head}{signature}\n{prompt.strip()}\n"
    return prompt


def build_harness(reference: str, entry_point: str, inputs: list[Any], atol: float) -> str:
    """A ``check(candidate)`` program comparing the candidate with the embedded reference on ``inputs``."""
    return HARNESS_TEMPLATE.format(
        reference=reference, entry_point=entry_point, inputs=repr(inputs), atol=atol
    )


def convert_evalplus_jsonl(row: dict[str, Any], source: str = "") -> tuple[Problem | None, Issues]:
    """One row of evalplus's ``HumanEvalPlus.jsonl`` / ``MbppPlus.jsonl``."""
    issues: Issues = []
    task_id = row.get("task_id") if isinstance(row.get("task_id"), str) else ""
    prompt = row.get("prompt") if isinstance(row.get("prompt"), str) else ""
    solution = row.get("canonical_solution") if isinstance(row.get("canonical_solution"), str) else ""
    entry_point = row.get("entry_point") if isinstance(row.get("entry_point"), str) else ""
    if not solution.strip():
        issues.append(("canonical_solution", "missing"))
        reference = ""
    elif defines(solution, entry_point):
        reference = solution
    else:  # HumanEval+ style: the solution is the body that follows the prompt
        reference = prompt + solution
    imports = imports_of(prompt) if defines(prompt + "\n    pass\n", entry_point) else imports_of(reference)
    reference = with_imports(reference, imports) if reference else ""
    inputs = [*(row.get("base_input") or []), *(row.get("plus_input") or [])]
    atol = row.get("atol") if isinstance(row.get("atol"), (int, float)) else 0.0
    harness: str | None = None
    if inputs and reference and defines(reference, entry_point):
        if not all(isinstance(args, list) for args in inputs):
            issues.append(("base_input", "expected a list of argument lists"))
        else:
            harness = build_harness(reference, entry_point, inputs, float(atol))
    elif isinstance(row.get("test"), str) and "def check(" in row["test"]:
        harness = row["test"]
    problem = Problem(
        id=task_id,
        question=_question(prompt, reference, entry_point),
        entry_point=entry_point,
        reference=reference,
        imports=imports,
        source=source or ("mbppplus" if task_id.lower().startswith("mbpp") else "humanevalplus"),
        harness=harness,
    )
    return problem, issues
