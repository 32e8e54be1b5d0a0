"""The bottom of ``codea1.data``: what every reader and converter shares.

The error and warning types, the row types a reader produces (:class:`LoadedRow`) and a check
rejects (:class:`InvalidRow`), and the AST helpers the converters and the checks use on source
code from data files. Nothing here reads a file or knows a format.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from codea1.types import Problem

Issues = list[tuple[str, str]]
"""``(field, reason)`` pairs found while converting or checking a row."""


class DataError(ValueError):
    """Problem data that cannot be used; the message names the file, row and field."""


class DataWarning(UserWarning):
    """Problem data that loads but is probably not what was meant (e.g. an unknown column)."""


@dataclass(frozen=True)
class InvalidRow:
    """One row that failed a check. ``row`` is 1-based (the line number for JSONL); 0 = the whole file."""

    file: str
    row: int
    field: str
    reason: str
    id: str = ""

    def __str__(self) -> str:
        where = f"{self.file}: row {self.row}" if self.row else self.file
        ident = f" (id {self.id!r})" if self.id else ""
        return f"{where}{ident}: field '{self.field}': {self.reason}"


@dataclass
class LoadedRow:
    """A row as a loader read it: the problem it became (``None`` if it could not), and any issues."""

    file: str
    row: int
    problem: Problem | None
    issues: Issues = field(default_factory=list)
    """``(field, reason)`` pairs found while converting the row."""


def repo_root() -> Path:
    """The directory holding the ``codea1`` package (its parent)."""
    return Path(__file__).resolve().parent.parent.parent


# --------------------------------------------------------------------------------------------------
# Source-code helpers shared by the converters and the checks
# --------------------------------------------------------------------------------------------------


def parse_quietly(code: str) -> ast.Module:
    """``ast.parse`` without the SyntaxWarnings (invalid escapes) that old data is full of."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(code)


def defined_names(tree: ast.Module) -> set[str]:
    """Top-level names a module defines: functions, classes, simple assignments, and class methods."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                names.update(
                    m.name for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                )
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def defines(code: str, name: str) -> bool:
    """True when ``code`` parses and defines ``name`` at the top level (see :func:`defined_names`)."""
    try:
        return name in defined_names(parse_quietly(code))
    except (SyntaxError, ValueError):
        return False


def imports_of(code: str) -> str:
    """The top-level ``import`` / ``from ... import`` statements of ``code``, one a line ("" if it does not parse)."""
    try:
        tree = parse_quietly(code)
    except (SyntaxError, ValueError):
        return ""
    return "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))


def with_imports(code: str, imports: str) -> str:
    """``code`` preceded by each line of ``imports`` that it does not already contain."""
    present = {line.strip() for line in code.splitlines()}
    missing = [line.strip() for line in imports.splitlines() if line.strip() and line.strip() not in present]
    if not missing:
        return code
    return "\n".join(missing) + "\n\n" + code.lstrip("\n")


def syntax_reason(code: str) -> str | None:
    """``None`` if ``code`` parses, else ``"line N: message"``."""
    try:
        parse_quietly(code)
    except SyntaxError as e:
        return f"line {e.lineno}: {e.msg}"
    except ValueError as e:  # e.g. source code string cannot contain null bytes
        return str(e)
    return None
