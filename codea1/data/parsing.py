"""Turn model responses into code and tests; pure functions, no execution.

* :func:`extract_code`: the Code LLM's function. Fenced blocks (```python, ```py, plain ```, an
  unterminated fence runs to the end) are tried in order and the first that parses and defines the
  entry point at top level (a function, a class, a method of a top-level class, or an assignment)
  wins. Unfenced answers are used when they parse, after dropping leading prose lines and trailing
  prose that starts at column 0; an answer whose only fences are empty (code written without its
  opening fence, then a stray closing one) counts as unfenced. Failures carry a reason: ``no code``, ``syntax error: ...``,
  ``no block defines <entry_point>`` (fenced) or ``entry point not defined`` (unfenced). Unlike the
  reference (docs/algorithm.md, bug R5), plain and ```py fences are not passed through with their prose.
* :func:`extract_tests`: the Test LLM's ``assert CALL == EXPR`` lines, from every Python block (or,
  without blocks, from raw lines starting with ``assert``), multi-line and inside ``def test_...``
  bodies, with simple ``name = expr`` assignments substituted into bare-name call arguments (and a
  bare-name expected value). Every assert that cannot become a test is counted with a reason; an
  operator other than a single ``==`` is rejected, never rewritten (docs/algorithm.md, bug R6).
* :func:`nonprintable_ratio`: the share of characters outside ``string.printable`` (ρ of
  docs/algorithm.md item 10).
"""

from __future__ import annotations

import ast
import copy
import re
import string
import textwrap
import warnings
from dataclasses import dataclass

from codea1.types import CodeExtraction, RejectedAssert, RejectReason, TestCase, TestExtraction

PYTHON_FENCE_LANGS = frozenset({"", "python", "py", "python3", "py3"})
"""Fence info strings whose blocks are read as Python (case-insensitive)."""

_FENCE_OPEN = re.compile(r"^[ \t]*```+[ \t]*([A-Za-z0-9_+.-]*)")
_CODE_START = re.compile(r"^(?:async[ \t]+def|def|class|import|from|@)\b|^@")
_ASSERT_START = re.compile(r"^[ \t]*assert\b")
_MAX_CHUNK_LINES = 60
_PRINTABLE = frozenset(string.printable)


@dataclass(frozen=True)
class FencedBlock:
    """A fenced block: its info string (lower case), its body, and whether a closing fence was found."""

    lang: str
    body: str
    closed: bool


def fenced_blocks(text: str) -> list[FencedBlock]:
    """Every ``` fenced block in ``text``, in order; an unterminated block runs to the end."""
    lines = text.split("\n")
    blocks: list[FencedBlock] = []
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        i += 1
        if not m:
            continue
        body: list[str] = []
        closed = False
        while i < len(lines):
            line = lines[i]
            i += 1
            if line.strip().startswith("```"):
                closed = True
                break
            if line.rstrip().endswith("```"):  # code and closing fence on one line
                body.append(line.rstrip()[:-3])
                closed = True
                break
            body.append(line)
        blocks.append(FencedBlock(m.group(1).lower(), "\n".join(body), closed))
    return blocks


def _python_blocks(text: str) -> list[str]:
    return [textwrap.dedent(b.body).strip("\n") for b in fenced_blocks(text) if b.lang in PYTHON_FENCE_LANGS]


def _defines(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.ClassDef) and any(
            isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name == name for m in node.body
        ):
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return True
    return False


def _mentions(code: str, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", code) is not None


def _syntax(e: SyntaxError) -> str:
    return f"syntax error: {e.msg} (line {e.lineno})"


def _parse(code: str) -> ast.Module | SyntaxError:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(code)
    except SyntaxError as e:
        return e
    except ValueError as e:  # null bytes
        return SyntaxError(str(e))


def extract_code(response: str, entry_point: str) -> CodeExtraction:
    """The code in a Code-LLM ``response`` that defines ``entry_point``, or why there is none."""
    if not response or not response.strip():
        return CodeExtraction(None, "no code")
    fences = fenced_blocks(response)
    if fences and all(not b.body.strip() for b in fences):
        # Only empty fences, e.g. code written without its opening fence but with a stray closing one:
        # the answer is unfenced, so read it as such with the fence lines dropped.
        kept = "\n".join(line for line in response.split("\n") if not _FENCE_OPEN.match(line))
        return _extract_unfenced(kept, entry_point) if kept.strip() else CodeExtraction(None, "no code")
    if fences:
        blocks = [c for c in _python_blocks(response) if c.strip()]
        if not blocks:
            return CodeExtraction(None, "no code")
        first_error = ""
        for code in blocks:
            parsed = _parse(code)
            if isinstance(parsed, SyntaxError):
                if not first_error and _mentions(code, entry_point):
                    first_error = _syntax(parsed)
            elif _defines(parsed, entry_point):
                return CodeExtraction(code)
        return CodeExtraction(None, first_error or f"no block defines {entry_point}")
    return _extract_unfenced(response, entry_point)


def _prose_like(tree: ast.Module) -> bool:
    """A top-level bare name such as ``Sure`` or ``Solution``: prose that happens to parse."""
    return any(isinstance(n, ast.Expr) and isinstance(n.value, (ast.Name, ast.Attribute)) for n in tree.body)


def _extract_unfenced(response: str, entry_point: str) -> CodeExtraction:
    lines = response.strip("\n").split("\n")
    starts = [0] + [i for i, line in enumerate(lines) if i > 0 and _CODE_START.match(line)]
    first_error = ""
    parsed_any = False
    for start in starts:
        region = lines[start:]
        while region:
            code = "\n".join(region).rstrip()
            parsed = _parse(code)
            if isinstance(parsed, SyntaxError):
                n = parsed.lineno or 0
                # Prose after the code starts at column 0: cut before it and retry.
                if 1 < n <= len(region) and region[n - 1][:1] not in ("", " ", "\t"):
                    region = region[: n - 1]
                    continue
                if not first_error and _mentions(code, entry_point) and _CODE_START.match(region[0]):
                    first_error = _syntax(parsed)
                break
            if _prose_like(parsed):
                break
            parsed_any = True
            if _defines(parsed, entry_point):
                return CodeExtraction(code.strip("\n"))
            break
    if first_error:
        return CodeExtraction(None, first_error)
    return CodeExtraction(None, "entry point not defined" if parsed_any else "no code")


# --------------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------------


class _LineScanner:
    """Tracks brackets, strings and line continuations across lines (comments and strings aware)."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote = ""  # the open string's delimiter: ', ", ''' or """
        self.continued = False

    @property
    def complete(self) -> bool:
        return self.depth <= 0 and not self.quote and not self.continued

    def feed(self, line: str) -> None:
        i, n = 0, len(line)
        self.continued = False
        while i < n:
            c = line[i]
            if self.quote:
                if c == "\\":
                    i += 2
                    continue
                if line.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = ""
                    continue
                i += 1
                continue
            if c == "#":
                break
            if c in "'\"":
                self.quote = line[i : i + 3] if line.startswith(c * 3, i) else c
                i += len(self.quote)
                continue
            if c in "([{":
                self.depth += 1
            elif c in ")]}":
                self.depth -= 1
            elif c == "\\" and i == n - 1:
                self.continued = True
            i += 1
        if self.quote in ("'", '"') and not line.endswith("\\"):
            self.quote = ""  # an unterminated one-line string: the line is broken, not continued


def _chunks(lines: list[str], *, asserts_only: bool) -> list[str]:
    """Split lines into balanced statements; with ``asserts_only`` only chunks starting with ``assert``."""
    out: list[str] = []
    chunk: list[str] = []
    scanner = _LineScanner()
    for line in lines:
        if not chunk:
            if asserts_only and not _ASSERT_START.match(line):
                continue
            scanner = _LineScanner()
        elif _ASSERT_START.match(line) and not scanner.quote:  # a new assert: the open one was broken
            out.append("\n".join(chunk))
            chunk, scanner = [], _LineScanner()
        chunk.append(line)
        scanner.feed(line)
        if scanner.complete or len(chunk) >= _MAX_CHUNK_LINES:
            out.append("\n".join(chunk))
            chunk = []
    if chunk:
        out.append("\n".join(chunk))
    return out


def _substitute(node: ast.expr, env: dict[str, ast.expr]) -> ast.expr:
    if isinstance(node, ast.Name) and node.id in env:
        return copy.deepcopy(env[node.id])
    if isinstance(node, ast.Starred):
        return ast.Starred(value=_substitute(node.value, env), ctx=node.ctx)
    return node


def _involves(call: ast.Call, entry_point: str) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == entry_point)
        or (isinstance(n, ast.Attribute) and n.attr == entry_point)
        for n in ast.walk(call)
    )


class _Suite:
    """Accumulates the tests and rejections of one response."""

    def __init__(self, entry_point: str) -> None:
        self.entry_point = entry_point
        self.env: dict[str, ast.expr] = {}
        self.tests: list[TestCase] = []
        self.rejected: list[RejectedAssert] = []
        self.seen: set[tuple[str, str]] = set()

    def reject(self, text: str, reason: RejectReason) -> None:
        self.rejected.append(RejectedAssert(text.strip(), reason))

    def chunk(self, source: str) -> None:
        src = source.strip()
        if not src or src.startswith("#"):
            return
        parsed = _parse(src)
        if isinstance(parsed, SyntaxError):
            if _ASSERT_START.match(src):
                self.reject(src, "syntax")
            return
        for stmt in parsed.body:
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
            ):
                self.env[stmt.targets[0].id] = _substitute(stmt.value, self.env)
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
                self.env[stmt.target.id] = _substitute(stmt.value, self.env)
            elif isinstance(stmt, ast.Assert):
                self.assertion(stmt, ast.get_source_segment(src, stmt) or ast.unparse(stmt))

    def assertion(self, stmt: ast.Assert, text: str) -> None:
        test = stmt.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
            return self.reject(text, "operator")
        if not isinstance(test.left, ast.Call):
            return self.reject(text, "not_call")
        left = test.left
        call = ast.Call(
            func=left.func,
            args=[_substitute(a, self.env) for a in left.args],
            keywords=[ast.keyword(arg=k.arg, value=_substitute(k.value, self.env)) for k in left.keywords],
        )
        if not _involves(call, self.entry_point):
            return self.reject(text, "no_entry_point")
        case = TestCase(
            call=ast.unparse(call), predicted=ast.unparse(_substitute(test.comparators[0], self.env))
        )
        key = (case.call, case.predicted)
        if key in self.seen:
            return self.reject(text, "duplicate")
        self.seen.add(key)
        self.tests.append(case)


def extract_tests(response: str, entry_point: str) -> TestExtraction:
    """The ``assert CALL == EXPR`` tests of a Test-LLM ``response`` for ``entry_point``, and the rejects."""
    suite = _Suite(entry_point)
    blocks = _python_blocks(response or "")
    if blocks:
        for block in blocks:
            for chunk in _chunks(block.split("\n"), asserts_only=False):
                suite.chunk(chunk)
    else:
        for chunk in _chunks((response or "").split("\n"), asserts_only=True):
            suite.chunk(chunk)
    return TestExtraction(
        tests=tuple(suite.tests),
        rejected=tuple(suite.rejected),
        nonprintable_ratio=nonprintable_ratio(response or ""),
    )


def nonprintable_ratio(text: str) -> float:
    """Fraction of the characters of ``text`` not in ``string.printable`` (0.0 for empty text)."""
    if not text:
        return 0.0
    return sum(c not in _PRINTABLE for c in text) / len(text)
