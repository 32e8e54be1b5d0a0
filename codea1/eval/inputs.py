"""Read evaluation inputs given as files instead of a model: code samples and test suites (JSONL).

Code samples (the evalplus habit): one ``{"id", "completion"}`` (raw model text; the code is
extracted) or ``{"id", "solution"}`` (code as is) per line; several lines per id are several
samples, in file order. Test suites: ``{"id", "completion"}`` (raw Test-LLM text) or
``{"id", "tests": ["assert ...", ...]}``; several lines per id are several suites.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from codea1.data.parsing import extract_tests
from codea1.eval.code_eval import CodeInput
from codea1.eval.results import read_jsonl
from codea1.eval.test_eval import suite_from_lines
from codea1.types import Problem, TestExtraction


def _rows(path: Path, problems: Sequence[Problem]) -> tuple[list[tuple[Problem, dict]], list[str]]:
    by_id = {p.id: p for p in problems}
    rows, unknown = [], []
    for i, row in enumerate(read_jsonl(path), 1):
        pid = row.get("id", row.get("task_id"))
        if not isinstance(pid, str):
            raise ValueError(f'{path}:{i}: every line needs a string "id"')
        if pid in by_id:
            rows.append((by_id[pid], row))
        else:
            unknown.append(pid)
    return rows, unknown


def read_code_samples(
    path: Path, problems: Sequence[Problem]
) -> tuple[dict[str, list[CodeInput]], list[str]]:
    """Samples per problem id, and the ids in the file that match no loaded problem."""
    rows, unknown = _rows(path, problems)
    out: dict[str, list[CodeInput]] = {}
    for _i, (p, row) in enumerate(rows, 1):
        if isinstance(row.get("solution"), str):
            item = CodeInput(row["solution"], extracted=True)
        elif isinstance(row.get("completion"), str):
            item = CodeInput(row["completion"])
        else:
            raise ValueError(f'{path}: line for {p.id} needs a string "completion" or "solution"')
        out.setdefault(p.id, []).append(item)
    return out, unknown


def read_test_suites(
    path: Path, problems: Sequence[Problem]
) -> tuple[dict[str, list[TestExtraction]], list[str]]:
    """Parsed suites per problem id, and the ids in the file that match no loaded problem."""
    rows, unknown = _rows(path, problems)
    out: dict[str, list[TestExtraction]] = {}
    for p, row in rows:
        tests = row.get("tests")
        if isinstance(tests, list) and all(isinstance(t, str) for t in tests):
            suite = suite_from_lines(tests, p.entry_point)
        elif isinstance(row.get("completion"), str):
            suite = extract_tests(row["completion"], p.entry_point)
        else:
            raise ValueError(f'{path}: line for {p.id} needs "completion" or a list of "tests"')
        out.setdefault(p.id, []).append(suite)
    return out, unknown
