"""The host's half of the test-side guard: which test calls judge behaviour only, and the grid
planner refusing the others with their reason (no sandbox needed)."""

from __future__ import annotations

import pytest

from codea1.config import SandboxConfig
from codea1.sandbox import grid
from codea1.sandbox.tasks import ExprOutcome, ProgramOutcome
from codea1.sandbox.test_guard import refusal
from codea1.types import GridJob, TestCase

HONEST = (
    "f(1, 2)",
    "f([i * i for i in range(5)], key=lambda v: -v)",
    "sorted(f('a b'.split()))",
    "Solution().f(3)",
    "f(TreeNode(1, TreeNode(2)), math.inf)",
    "f(f(2))",
    "f(lambda x: f(x), {'a': [1, 2]})",
    "f(x for x in range(3))",
    "f(*[[0] * 3] * 3, n=(k := 4) + k)",
)


@pytest.mark.parametrize("call", HONEST)
def test_behaviour_tests_are_kept(call: str) -> None:
    assert refusal(call, "f") == ""


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        ("f(len(f.__code__.co_code))", "test uses f other than by calling it"),
        ("f(f.__defaults__)", "test uses f other than by calling it"),
        ("f(inspect.getsource(f))", "test uses f other than by calling it"),
        ("f(Solution.f)", "test uses f other than by calling it"),
        ("g(f)", "test uses f other than by calling it"),
        ("f((f := lambda x: 0))", "test uses f other than by calling it"),
        ("f(len(sys.modules))", "test reaches interpreter state (modules)"),
        ("f(os.sys)", "test reaches interpreter state (sys)"),
        ("f(globals())", "test uses introspection (globals)"),
        ("f(vars())", "test uses introspection (vars)"),
        ("f(getattr(Node, 'x'))", "test uses introspection (getattr)"),
        ("f(id([]))", "test uses introspection (id)"),
        ("f((setattr(__import__('builtins'), 'sum', len), 1)[1])", "test uses introspection (setattr)"),
        ("f(__builtins__)", "test uses the special name __builtins__"),
        ("f(Node.__init__)", "test reads the attribute .__init__"),
        ("f(random._inst)", "test reads the attribute ._inst"),
        ("f('{0.x}'.format(Node))", "test reaches interpreter state (format)"),
        ("f([0 for m.sum in [len]])", "test assigns to an attribute or an item"),
        ("f([0 for d['k'] in [1]])", "test assigns to an attribute or an item"),
        ("f(type('X', (), {}))", "test defines a class"),
        ("f(", "test does not parse"),
    ],
)
def test_tests_that_inspect_or_patch_are_refused(call: str, reason: str) -> None:
    assert refusal(call, "f") == reason


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        ("f(len((0 for _ in []).gi_frame.f_globals))", "test reaches interpreter internals (.f_globals)"),
        ("f((0 for _ in []).gi_frame.f_builtins['getattr'](f, 'x'))", "test uses f other than by calling it"),
        ("f(len((0 for _ in []).gi_frame))", "test reaches interpreter internals (.gi_frame)"),
        (
            "f(str((x for x in [1]).gi_frame.f_back.f_locals))",
            "test reaches interpreter internals (.f_locals)",
        ),
        ("f((x for x in [1]).gi_code)", "test reaches interpreter internals (.gi_code)"),
        ("f(len(g().cr_frame))", "test reaches interpreter internals (.cr_frame)"),
        ("f(a().ag_frame)", "test reaches interpreter internals (.ag_frame)"),
        ("f(frame.f_back)", "test reaches interpreter internals (.f_back)"),
        ("f(tb.tb_frame)", "test reaches interpreter internals (.tb_frame)"),
        ("f(tb.tb_next)", "test reaches interpreter internals (.tb_next)"),
        ("f(len((lambda: 0).co_code))", "test reaches interpreter internals (.co_code)"),
        ("f(e.__traceback__)", "test reads the attribute .__traceback__"),
    ],
)
def test_tests_that_reach_frames_or_code_are_refused(call: str, reason: str) -> None:
    assert refusal(call, "f") == reason


def test_refused_tests_are_not_run_and_their_oracle_is_invalid_with_the_reason() -> None:
    job = GridJob(
        "p",
        "def f(x):\n    return x\n",
        "f",
        ("def f(x):\n    return x\n",),
        (TestCase("f(1)", "1"), TestCase("f(len(f.__code__.co_code))", "4")),
    )
    plan = grid.plan_oracle([job], SandboxConfig())
    assert [t.exprs for t in plan.tasks] == [("f(1)", "1")]
    outcomes = [ProgramOutcome("pass", "", (ExprOutcome("value", value=1), ExprOutcome("value", value=1)))]
    oracle = grid.oracle_verdicts([job], plan, outcomes, 1e-6, 1e-6)
    assert [(v.status, v.reason) for v in oracle.verdicts[0]] == [
        ("valid", ""),
        ("invalid", "test uses f other than by calling it"),
    ]
    assert grid.plan_codes([job], oracle, SandboxConfig()).tasks[0].exprs == ("f(1)",)
