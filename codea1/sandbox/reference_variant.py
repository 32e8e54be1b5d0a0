"""A behaviour-preserving variant of a reference solution, for the oracle's second run (trusted side).

A test must judge what the function does. A test whose outcome depends on anything else (the
program's text or line numbers, its functions' bytecode, the addresses objects get) has the same
outcome on the reference in every run, so checking it on the reference alone never tells. The
grid therefore runs each test call that does more than call the entry point on literals a second
time, on :func:`variant` of the reference in a shifted heap (``ProgramTask.shift_heap``), and a call
whose outcome differs there is ``invalid`` (docs/sandbox.md, "Tests judge behaviour only").

The variant is the reference's own text, with :data:`HEADER` before it (every line number moves,
the text differs) and a no-op statement, ``(lambda: None)``, at the top of every function body
that starts on a line of its own (the bytecode, the constants and the code's length differ). It
defines the same names, computes the same values and calls the same functions; only code that
reads its own source, bytecode, line numbers or memory addresses can tell it from the reference.
"""

from __future__ import annotations

import ast
import re
import warnings

HEADER = "# codea1: a behaviour-preserving variant of the reference (the oracle's second run)\n\n\n"
"""Lines put before the variant (they move every line number of the reference)."""
_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
NO_OP = "(lambda: None)"
"""The statement put at the top of each function body (no effect; new bytecode and constants)."""


def variant(reference: str) -> str | None:
    """The reference's behaviour-preserving variant (module docstring), or None when the reference
    does not parse or the variant does not compile."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(reference)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    lines = _LINES.findall(reference)  # line ends as Python counts them (not str.splitlines's)
    inserts: dict[int, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        body = node.body
        if len(body) == 1 and _is_docstring(body[0]):
            continue  # a docstring alone: a statement before it would unmake the docstring
        first = body[1] if _is_docstring(body[0]) else body[0]
        if first.lineno == node.lineno or first.lineno > len(lines):
            continue  # a one-line function: its text and line numbers still change
        line = lines[first.lineno - 1]
        indent = line[: first.col_offset]
        if indent.strip() or len(indent.encode("utf-8")) != first.col_offset:
            continue  # not the first statement of its line (or a non-ASCII indent): left as it is
        inserts[first.lineno - 1] = f"{indent}{NO_OP}\n"
    for i in sorted(inserts, reverse=True):
        lines.insert(i, inserts[i])
    for text in (HEADER + "".join(lines), HEADER + reference):
        if _compiles(text):
            return text
    return None


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _compiles(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(text, "<variant>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


_LITERAL_NODES = (ast.Expression, ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.UnaryOp,
                  ast.BinOp, ast.keyword, ast.Starred, ast.expr_context, ast.operator, ast.unaryop)  # fmt: skip


def calls_on_literals(call: str, entry_point: str) -> bool:
    """True when ``call`` only calls the entry point on literals (``f(1, [2, 'a'], k=-3)``,
    ``f(f(2))``, ``f(2 ** 10)``): its outcome is the entry point's behaviour on fixed inputs, so it
    needs no second run."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(call, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    funcs = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id == entry_point):
                return False
        elif isinstance(node, ast.Name):
            if node.id != entry_point or id(node) not in funcs:
                return False
        elif not isinstance(node, _LITERAL_NODES):
            return False
    return True
