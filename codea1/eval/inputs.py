"""Read evaluation inputs given as files instead of a model: code samples and test suites.

Code samples come in the formats of the harnesses users bring them from (``--samples-format``):

* ``codea1``: JSONL ``{"id", "completion"}`` (raw model text; the code is extracted, fences and
  all) or ``{"id", "solution"}`` (code as is);
* ``human-eval`` (OpenAI's harness): JSONL ``{"task_id", "completion"}``, where ``completion`` is
  the body that follows the prompt; the program is prompt + completion, as that harness runs it;
* ``evalplus``: JSONL ``{"task_id", "solution"}`` (the whole program) or ``{"task_id",
  "completion"}`` (read as ``human-eval``);
* ``bigcode`` (bigcode-evaluation-harness): a JSON array with one list of generations per problem,
  in the data's order; each generation is the whole program (prompt included);
* ``auto``: ``bigcode`` for a JSON array, ``codea1`` when the lines are keyed by ``id``,
  ``evalplus`` when keyed by ``task_id``; a file that mixes the two is refused.

Several lines per id are several samples, in file order. Test suites (JSONL): ``{"id",
"completion"}`` (raw Test-LLM text) or ``{"id", "tests": ["assert ...", ...]}``; several lines per id
are several suites.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from codea1.data.parsing import extract_tests
from codea1.eval.code_eval import CodeInput
from codea1.eval.suite_eval import suite_from_lines
from codea1.results_file import read_jsonl
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


SAMPLE_FORMATS = ("auto", "codea1", "human-eval", "evalplus", "bigcode")
"""What ``--samples-format`` accepts."""


def detect_samples_format(path: Path) -> str:
    """The format of a samples file (see the module docstring); ValueError when it is ambiguous."""
    with open(path, "rb") as f:
        head = f.read(4096).removeprefix(codecs.BOM_UTF8).lstrip()
    if head.startswith(b"["):
        return "bigcode"
    keys = {"id" if "id" in row else "task_id" if "task_id" in row else "" for row in read_jsonl(path)}
    keys.discard("")  # a line with neither is reported by the reader, with its line number
    if keys == {"task_id"}:
        return "evalplus"
    if keys <= {"id"}:  # no key at all: the reader names the first line without one
        return "codea1"
    raise ValueError(
        f'{path}: some lines are keyed by "id" (codea1) and some by "task_id" (human-eval/evalplus); '
        "split the file or choose --samples-format"
    )


def _bigcode(path: Path, problems: Sequence[Problem]) -> tuple[dict[str, list[CodeInput]], list[str]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except RecursionError:
        raise ValueError(f"{path}: not usable JSON (nested too deeply)") from None
    if not (isinstance(data, list) and all(isinstance(g, list) for g in data)):
        raise ValueError(f"{path}: a bigcode generations file is a JSON array of lists of strings")
    out: dict[str, list[CodeInput]] = {}
    for p, generations in zip(problems, data, strict=False):
        if not all(isinstance(g, str) for g in generations):
            raise ValueError(f"{path}: the generations of {p.id} are not all strings")
        out[p.id] = [CodeInput(g, extracted=True) for g in generations]
    unknown = [f"#{i}" for i in range(len(problems), len(data))]
    return out, unknown


def read_code_samples(
    path: Path, problems: Sequence[Problem], samples_format: str = "auto"
) -> tuple[dict[str, list[CodeInput]], list[str]]:
    """Samples per problem id, and the ids in the file that match no loaded problem.

    ``samples_format`` is one of :data:`SAMPLE_FORMATS`; ValueError on a line that does not fit it.
    """
    if samples_format not in SAMPLE_FORMATS:
        raise ValueError(f"unknown samples format {samples_format!r}: use one of {', '.join(SAMPLE_FORMATS)}")
    fmt = detect_samples_format(path) if samples_format == "auto" else samples_format
    if fmt == "bigcode":
        return _bigcode(path, problems)
    rows, unknown = _rows(path, problems)
    out: dict[str, list[CodeInput]] = {}
    for p, row in rows:
        solution, completion = row.get("solution"), row.get("completion")
        if fmt == "evalplus" and isinstance(solution, str):
            item = CodeInput(solution, extracted=True)
        elif fmt in ("human-eval", "evalplus") and isinstance(completion, str):
            item = CodeInput(completion, extracted=True, continuation=True)
        elif fmt == "codea1" and isinstance(solution, str):
            item = CodeInput(solution, extracted=True)
        elif fmt == "codea1" and isinstance(completion, str):
            item = CodeInput(completion)
        else:
            want = '"completion"' if fmt == "human-eval" else '"completion" or "solution"'
            raise ValueError(f"{path}: line for {p.id} needs a string {want} ({fmt} samples)")
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


def no_code_warning(records: Sequence[Mapping[str, Any]], samples_format: str) -> str | None:
    """A loud warning when most samples of checked ``records`` yielded no code, with the likely cause."""
    reasons = [
        r for rec in records for s, r in zip(rec["status"], rec["reason"], strict=True) if s == "invalid"
    ]
    total = sum(len(rec["status"]) for rec in records)
    if not total or len(reasons) * 2 <= total:
        return None
    common = max(set(reasons), key=reasons.count)
    hint = (
        "if these are human-eval or evalplus samples (completion = the body after the prompt), use "
        "--samples-format human-eval"
        if samples_format in ("auto", "codea1")
        else "check that --samples-format matches the harness that wrote the file"
    )
    return f"WARNING: {len(reasons)} of {total} samples have no usable code (most often: {common!r}); {hint}"
