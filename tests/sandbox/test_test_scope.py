"""The worker's half of the test-side guard, run through the real sandbox with the host's check
bypassed (``run_tasks`` takes expressions as they are): what a test computes from the function
object is the same in every program, and a change of the interpreter's state before a call makes
the test raise with the reason."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from codea1.config import SandboxConfig
from codea1.sandbox import Sandbox
from codea1.sandbox.tasks import ExprOutcome, ProgramTask

LOOP = "def f(x):\n    s = 0\n    for v in x:\n        s += v\n    return s\n"
BUILTIN = "import sys\ndef f(x):\n    return sum(x)\n"
CHANGED = "test changed interpreter state"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(SandboxConfig(workers=1)) as sb:
        yield sb


def _run(sandbox: Sandbox, source: str, exprs: tuple[str, ...]) -> tuple[ExprOutcome, ...]:
    (out,) = sandbox.run_tasks([ProgramTask(source, "f", exprs)])
    assert out.load_status == "pass", out.load_reason
    return out.exprs


def test_what_a_test_reads_of_the_function_is_the_same_in_every_program(sandbox: Sandbox) -> None:
    exprs = (
        "f([len(f.__code__.co_code)])",
        "f(list(f.__defaults__ or [1]))",
        "f((globals().__setitem__('sum', lambda *a: -1), [1, 2])[1])",  # binds in the test's own copy
        "(lambda g: g([3]))(f)",
    )
    loop, builtin = _run(sandbox, LOOP, exprs), _run(sandbox, BUILTIN, exprs)
    assert [o.kind for o in loop] == ["value"] * 4
    assert [o.value for o in loop] == [o.value for o in builtin]
    assert [o.value for o in loop][2:] == [3, 3]


@pytest.mark.parametrize(
    ("expr", "what"),
    [
        ("f((setattr(__import__('builtins'), 'sum', lambda *a, **k: -1), [1, 2])[1])", "builtins.sum"),
        ("f([0 for __import__('builtins').sum in [len]][1:] + [1, 2])", "builtins.sum"),
        ("f((__import__('sys').setrecursionlimit(40), [1, 2])[1])", "interpreter settings"),
        ("f((setattr(__import__('sys'), 'maxsize', 3), [1, 2])[1])", "sys.maxsize"),
        ("f((setattr(__import__('math'), 'pi', 3), [1])[1])", ""),
        ("max(f([1]), f((setattr(__import__('builtins'), 'sum', len), [1])[1]))", "builtins.sum"),
        ("f([1]) + (setattr(__import__('sys'), 'maxsize', 3), 0)[1]", "sys.maxsize"),  # after the call
    ],
)
def test_a_change_of_state_before_a_call_is_reported(sandbox: Sandbox, expr: str, what: str) -> None:
    for source in (LOOP, BUILTIN):
        (out,) = _run(sandbox, source, (expr,))
        if not what:  # math is not in the program's namespace: nothing the entry point reads
            assert out.kind == "value"
            continue
        assert (out.kind, out.reason) == ("raise", f"{CHANGED} ({what})"), source


def test_what_the_entry_point_changes_itself_is_its_own(sandbox: Sandbox) -> None:
    source = "import sys\nmemo = {}\ndef f(n):\n    global memo\n    sys.setrecursionlimit(5000)\n    memo = {n: n}\n    return n\n"
    (out,) = _run(sandbox, source, ("f(f(len('a b'.split())))",))
    assert (out.kind, out.value) == ("value", 2)


def test_the_guard_costs_no_recursion_depth(sandbox: Sandbox) -> None:
    """A recursive entry point reaches the same depth through the guard as called directly (by an
    alias, which the guard does not wrap), with and without the state check."""
    source = "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\nalias = f\n"
    ns = range(960, 1000)
    guarded = _run(sandbox, source, tuple(f"f({n})" for n in ns))
    checked = _run(sandbox, source, tuple(f"f(len('a'.split()) * {n})" for n in ns))
    direct = _run(sandbox, source, tuple(f"alias({n})" for n in ns))
    depth = [sum(o.kind == "value" for o in outs) for outs in (guarded, checked, direct)]
    assert 0 < depth[2] < len(ns)
    assert depth[0] == depth[1] == depth[2]


QUESTION = (
    "import math\n\ndef double(x):\n    return 2 * x\n\ndef quad(x):\n    return double(double(x))\n\n"
    "def boxed(v):\n    return Box(v)\n\ndef via_f(x):\n    return f(x) + 1\n"
)


def test_a_test_calls_the_questions_helpers_not_the_programs(sandbox: Sandbox) -> None:
    """The question's helpers and imports reach the test from the trusted copy: a program that
    redefines them (or rebinds the module a helper uses) changes what its own code calls, never what
    the test calls. A helper's other names resolve as the test's: the question's other helpers, the
    program's classes, the entry point's guard."""
    program = (
        "math = None\nclass Box:\n    def __init__(self, v):\n        self.v = v\n"
        "def double(x):\n    return 7\ndef f(x):\n    return double(x)\n"
    )
    exprs = ("double(f(1))", "quad(1)", "boxed(3).v", "math.floor(2.5)", "via_f(2)", "(lambda: double(5))()")
    (out,) = sandbox.run_tasks([ProgramTask(program, "f", exprs, question_helpers=QUESTION)])
    assert out.load_status == "pass", out.load_reason
    assert [(o.kind, o.value) for o in out.exprs] == [("value", v) for v in (14, 4, 3, 2, 8, 10)]


def test_a_question_statement_that_fails_binds_nothing_and_other_names_stay_the_programs(
    sandbox: Sandbox,
) -> None:
    program = "def double(x):\n    return 7\ndef f(x):\n    return x\n"
    helpers = "import no_such_module_anywhere\n\ndef triple(x):\n    return 3 * x\n"
    (plain, broken) = sandbox.run_tasks(
        [ProgramTask(program, "f", ("double(1)",)), ProgramTask(program, "f", ("double(1)", "triple(1)"), question_helpers=helpers)]
    )  # fmt: skip
    assert [o.value for o in plain.exprs] == [7]
    assert broken.load_status == "pass" and [o.value for o in broken.exprs] == [7, 3]
