"""Line and branch coverage of a function under test calls, measured inside the sandbox.

The sandbox worker imports only the standard library, so coverage.py cannot run there. Instead the
program sent to the sandbox carries its own small tracer (standard library only: ``sys.settrace``
and ``dis``), which records arcs the way coverage.py's Python tracer does: ``(previous line,
line)`` inside the function's frames, ``-firstlineno`` for a frame's entry and exit, a generator's
resumption continuing from its line, an exception handler's entry skipped. The program binds the
entry point's name to a wrapper that traces only while the function runs (the trace function is
back as it was when the call returns, as the worker's test guard requires), and each test is the
expression ``_codea1_cover(lambda: (CALL))``: it evaluates the test's call, swallows what it raises
(the lines it ran still count, as under pytest-cov) and returns the arcs as a tuple of pairs.

On the trusted side, coverage.py's parser (``coverage.parser.PythonParser``, static analysis of the
function's source: nothing is run) gives the statements and the possible arcs; what the sandbox
returns is kept only where it is a possible arc of the function, so nothing a test does can count
more than the function has. The def line (and decorators) run when the program loads, not under a
test, so they are not statements here; a line ``L`` of a multi-line statement counts as its first
line, as in coverage.py. A branch is an arc leaving a line with more than one possible exit.
A call that :func:`codea1.sandbox.test_guard.refusal` refuses is not run.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from codea1.sandbox.tasks import ProgramOutcome, ProgramTask
from codea1.sandbox.test_guard import refusal

_TRACER = """

def _codea1_install_cover(_name, _lo, _hi):
    import dis as _dis
    import sys as _sys

    _resume = _dis.opmap.get("RESUME")
    _push_exc = _dis.opmap.get("PUSH_EXC_INFO")
    _yield_at_lasti = _sys.version_info[:2] != (3, 13)
    _target = globals()[_name]
    _file = _target.__code__.co_filename
    _arcs = set()

    def _frame_tracer(frame):
        code = frame.f_code
        first = code.co_firstlineno
        if _resume is not None:
            real_call = code.co_code[frame.f_lasti + 1] == 0
        else:
            real_call = frame.f_lasti < 0
        last = [-first if real_call else frame.f_lineno]

        def local(frame, event, arg):
            if event == "line":
                cc, lasti = code.co_code, frame.f_lasti
                if _push_exc is not None and 0 <= lasti < len(cc) and cc[lasti] == _push_exc:
                    return local
                _arcs.add((last[0], frame.f_lineno))
                last[0] = frame.f_lineno
            elif event == "return":
                cc, lasti = code.co_code, frame.f_lasti
                if _resume is not None:
                    at = lasti + 2 if _yield_at_lasti else lasti
                    real = len(cc) == lasti + 2 or at >= len(cc) or cc[at] != _resume
                else:
                    real = True
                if real:
                    _arcs.add((last[0], -first))
            return local

        return local

    def _global(frame, event, arg):
        code = frame.f_code
        if event != "call" or code.co_filename != _file or not _lo <= code.co_firstlineno <= _hi:
            return None
        return _frame_tracer(frame)

    def covered(*args, **kwargs):
        old = _sys.gettrace()
        _sys.settrace(_global)
        try:
            return _target(*args, **kwargs)
        finally:
            _sys.settrace(old)

    def cover(thunk):
        _arcs.clear()
        try:
            thunk()
        except Exception:
            pass
        return tuple(sorted(_arcs))

    globals()[_name] = covered
    return cover


_codea1_cover = _codea1_install_cover({name!r}, {lo}, {hi})
"""


class TaskRunner(Protocol):
    """What coverage needs from the sandbox: program tasks and the budgets to give them."""

    config: Any

    def run_tasks(self, tasks: Sequence[ProgramTask]) -> list[ProgramOutcome]: ...


@dataclass(frozen=True)
class Analysis:
    """The function's statements, its possible arcs and its branch lines (exit counts > 1), from
    coverage.py's parser; line numbers are the function source's own (1-based)."""

    statements: frozenset[int]
    arcs: frozenset[tuple[int, int]]
    branch_exits: dict[int, int]
    first_line: dict[int, int]

    @property
    def branches(self) -> int:
        """How many branch arcs the function has (coverage.py's ``num_branches``)."""
        return sum(self.branch_exits.values())


def analyse(code: str) -> Analysis:
    """Static analysis of ``code`` (one function, maybe decorated); ``SyntaxError`` if it does not parse."""
    from coverage.parser import PythonParser

    parser = PythonParser(text=code)
    parser.parse_source()
    header: set[int] = set()
    for node in ast.parse(code).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            header.update(range(start, node.body[0].lineno if node.body else node.lineno + 1))
        else:
            header.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    statements = frozenset(s for s in parser.statements if s not in header)
    arcs = frozenset(a for a in parser.arcs() if a[0] not in header and a[1] not in header)
    exits = {line: n for line, n in parser.exit_counts().items() if n > 1 and line in statements}
    first = {line: parser.first_line(line) for line in range(1, code.count("\n") + 2)}
    return Analysis(statements, arcs, exits, first)


def coverage_program(imports: str, code: str, entry_point: str) -> tuple[str, int]:
    """The program whose entry point records its arcs, and the line offset of ``code`` in it."""
    prefix = imports.strip() + "\n\n\n" if imports.strip() else ""
    body = code.rstrip("\n") + "\n"  # leading blank lines kept: line numbers are the code's own
    offset = prefix.count("\n")
    lo, hi = offset + 1, offset + body.count("\n")
    return prefix + body + _TRACER.format(name=entry_point, lo=lo, hi=hi), offset


def _arcs_of(value: Any, offset: int) -> set[tuple[int, int]]:
    """The arcs a test returned, in the function's own line numbers (anything malformed dropped)."""
    out: set[tuple[int, int]] = set()
    if not isinstance(value, (tuple, list)):
        return out
    for pair in value:
        if isinstance(pair, (tuple, list)) and len(pair) == 2 and all(type(x) is int for x in pair):
            a, b = (x - offset if x > 0 else x + offset for x in pair)
            out.add((a, b))
    return out


def measure_arcs(
    runner: TaskRunner, jobs: Sequence[tuple[str, str, str, Sequence[str]]]
) -> list[list[set[tuple[int, int]] | None]]:
    """Per job ``(imports, function code, entry point, calls)``: the arcs each call ran (in the
    function's line numbers), ``None`` for a call refused or not measured."""
    tasks: list[ProgramTask] = []
    plans: list[tuple[int, list[int | None], int]] = []
    for imports, code, entry_point, calls in jobs:
        program, offset = coverage_program(imports, code, entry_point)
        exprs: list[str] = []
        where: list[int | None] = []
        for call in calls:
            if refusal(call, entry_point):
                where.append(None)
                continue
            where.append(len(exprs))
            exprs.append(f"_codea1_cover(lambda: ({call}))")
        plans.append((len(tasks), where, offset))
        tasks.append(ProgramTask.make(program, entry_point, tuple(exprs), runner.config))
    outcomes = runner.run_tasks(tasks) if tasks else []
    result: list[list[set[tuple[int, int]] | None]] = []
    for index, where, offset in plans:
        outcome = outcomes[index]
        row: list[set[tuple[int, int]] | None] = []
        for w in where:
            if w is None or outcome.load_status != "pass" or w >= len(outcome.exprs):
                row.append(None)
                continue
            expr = outcome.exprs[w]
            row.append(_arcs_of(expr.value, offset) if expr.kind == "value" else None)
        result.append(row)
    return result


def percentages(analysis: Analysis, arcs: set[tuple[int, int]]) -> tuple[float, float]:
    """(line %, branch %) of the function for the executed ``arcs``; a function without branches has
    100 % branch coverage once any statement ran (as ``eval.coverage_run``)."""
    mapped = {(analysis.first_line.get(a, a), analysis.first_line.get(b, b)) for a, b in arcs}
    lines = {x for arc in mapped for x in arc if x > 0} & analysis.statements
    line = 100.0 * len(lines) / len(analysis.statements) if analysis.statements else 100.0
    if not analysis.branch_exits:
        return line, (100.0 if lines else 0.0)
    taken = {a for a in mapped & analysis.arcs if a[0] in analysis.branch_exits}
    return line, 100.0 * len(taken) / analysis.branches
