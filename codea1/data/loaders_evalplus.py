"""HumanEval+ and MBPP+: where the built-in names find their data, and evalplus's own JSONL format.

``humanevalplus`` / ``mbppplus`` resolve, in order, to:

1. ``HUMANEVAL_OVERRIDE_PATH`` / ``MBPP_OVERRIDE_PATH`` (evalplus's variables): a ``.jsonl`` or
   ``.jsonl.gz`` in evalplus's format (``task_id, prompt, canonical_solution, entry_point`` plus
   ``base_input``/``plus_input`` or a HumanEval-style ``test``);
2. ``CODEA1_EVALPLUS_PARQUET``: the evalplus parquet (both sets, split by ``data_source``);
3. ``<repo root>/../shared/data/evalplus_humaneval_mbpp_plus.parquet``.

For evalplus JSONL rows with inputs, the harness embeds the reference and compares the candidate's
output with the reference's on every input (evalplus-style float tolerance), since the JSONL holds
no expected outputs. Otherwise a HumanEval-style ``test`` defining ``check(candidate)`` is used.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

from codea1.data import loaders_files
from codea1.data.problems import DataError, LoadedRow, defined_names, parse_quietly, repo_root, with_imports
from codea1.types import Problem

OVERRIDE_ENV = {"humanevalplus": "HUMANEVAL_OVERRIDE_PATH", "mbppplus": "MBPP_OVERRIDE_PATH"}
PARQUET_ENV = "CODEA1_EVALPLUS_PARQUET"
SHARED_PARQUET = Path("..") / "shared" / "data" / "evalplus_humaneval_mbpp_plus.parquet"


def resolve(name: str) -> tuple[str, Path]:
    """``("jsonl" | "parquet", path)`` for ``humanevalplus`` or ``mbppplus``; :class:`DataError` if absent."""
    override = os.environ.get(OVERRIDE_ENV[name], "").strip()
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise DataError(f"{OVERRIDE_ENV[name]}={override}: no such file")
        return "jsonl", path
    env_parquet = os.environ.get(PARQUET_ENV, "").strip()
    if env_parquet:
        path = Path(env_parquet).expanduser()
        if not path.is_file():
            raise DataError(f"{PARQUET_ENV}={env_parquet}: no such file")
        return "parquet", path
    shared = (repo_root() / SHARED_PARQUET).resolve()
    if shared.is_file():
        return "parquet", shared
    raise DataError(
        f"{name} data not found: set {OVERRIDE_ENV[name]} to an evalplus JSONL "
        f"(task_id, prompt, canonical_solution, entry_point, base_input/plus_input), or {PARQUET_ENV} to "
        f"the evalplus parquet (GT_code, problem, test, data_source, extra_info), or place it at {shared}"
    )


def read_builtin(name: str) -> list[LoadedRow]:
    """Rows of ``humanevalplus``, ``mbppplus`` or ``evalplus`` (both, HumanEval+ first)."""
    names = ["humanevalplus", "mbppplus"] if name == "evalplus" else [name]
    parquet_rows: dict[Path, list[LoadedRow]] = {}
    out: list[LoadedRow] = []
    for n in names:
        kind, path = resolve(n)
        if kind == "jsonl":
            out.extend(loaders_files.read_file(path, source=n))
            continue
        if path not in parquet_rows:
            parquet_rows[path] = loaders_files.read_file(path)
        out.extend(r for r in parquet_rows[path] if r.problem is None or r.problem.source == n)
    return out


# --------------------------------------------------------------------------------------------------
# evalplus JSONL rows
# --------------------------------------------------------------------------------------------------

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


def _defines(code: str, name: str) -> bool:
    try:
        return name in defined_names(parse_quietly(code))
    except (SyntaxError, ValueError):
        return False


def _imports_of(code: str) -> str:
    try:
        tree = parse_quietly(code)
    except (SyntaxError, ValueError):
        return ""
    return "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))


def _question(prompt: str, reference: str, entry_point: str) -> str:
    """HumanEval+ prompts are already signature + docstring; MBPP+ prompts are only the docstring."""
    if _defines(prompt + "\n    pass\n", entry_point) or f"def {entry_point}" in prompt:
        return prompt
    try:
        tree = parse_quietly(reference)
    except (SyntaxError, ValueError):
        return prompt
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            signature = ast.unparse(node).splitlines()[0]
            imports = _imports_of(reference)
            head = f"{imports}\n\n" if imports else ""
            return f"{head}{signature}\n{prompt.strip()}\n"
    return prompt


def build_harness(reference: str, entry_point: str, inputs: list[Any], atol: float) -> str:
    """A ``check(candidate)`` program comparing the candidate with the embedded reference on ``inputs``."""
    return HARNESS_TEMPLATE.format(
        reference=reference, entry_point=entry_point, inputs=repr(inputs), atol=atol
    )


def convert_evalplus_jsonl(
    row: dict[str, Any], source: str = ""
) -> tuple[Problem | None, list[tuple[str, str]]]:
    """One row of evalplus's ``HumanEvalPlus.jsonl`` / ``MbppPlus.jsonl``."""
    issues: list[tuple[str, str]] = []
    task_id = row.get("task_id") if isinstance(row.get("task_id"), str) else ""
    prompt = row.get("prompt") if isinstance(row.get("prompt"), str) else ""
    solution = row.get("canonical_solution") if isinstance(row.get("canonical_solution"), str) else ""
    entry_point = row.get("entry_point") if isinstance(row.get("entry_point"), str) else ""
    if not solution.strip():
        issues.append(("canonical_solution", "missing"))
        reference = ""
    elif _defines(solution, entry_point):
        reference = solution
    else:  # HumanEval+ style: the solution is the body that follows the prompt
        reference = prompt + solution
    imports = (
        _imports_of(prompt) if _defines(prompt + "\n    pass\n", entry_point) else _imports_of(reference)
    )
    reference = with_imports(reference, imports) if reference else ""
    inputs = [*(row.get("base_input") or []), *(row.get("plus_input") or [])]
    atol = row.get("atol") if isinstance(row.get("atol"), (int, float)) else 0.0
    harness: str | None = None
    if inputs and reference and _defines(reference, entry_point):
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
