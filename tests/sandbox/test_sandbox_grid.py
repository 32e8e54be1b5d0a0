"""Sandbox.run_grids / run_checks: verdict semantics, deduplication, determinism, real harnesses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from codea1.config import SandboxConfig
from codea1.sandbox import Sandbox, grid
from codea1.sandbox.tasks import ProgramTask
from codea1.types import CheckJob, ExecGrid, GridJob, TestCase

REF = "def f(x):\n    return x * 2\n"
DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "evalplus_humaneval_mbpp_plus.parquet"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(SandboxConfig(workers=2, test_cpu_s=0.3, load_cpu_s=1.0)) as sb:
        yield sb


def _job(
    codes: tuple[str, ...], tests: tuple[tuple[str, str], ...], ref: str = REF, job_id: str = "j"
) -> GridJob:
    return GridJob(job_id, ref, "f", codes, tuple(TestCase(c, p) for c, p in tests))


def _statuses(g: ExecGrid) -> list[list[str]]:
    return [[v.status for v in row] for row in g.verdicts]


def test_layers_are_reported_with_reasons(sandbox: Sandbox) -> None:
    layers = sandbox.layers()
    for name in (
        "net_ns",
        "pid_ns",
        "mount_ns",
        "rlimits",
        "seccomp",
        "landlock",
        "cgroup_pids",
        "cgroup_memory",
    ):
        assert name in layers
    assert all(v == "active" or v.startswith("unavailable: ") for v in layers.values())


def test_oracle_and_candidate_verdicts(sandbox: Sandbox) -> None:
    codes = (
        REF,
        "def f(x):\n    return x + 2\n",
        "def f(x):\n    raise KeyError(x)\n",
        "def g(x):\n    return 1\n",
    )
    tests = (("f(2)", "4"), ("f(3)", "7"), ("f('a')", "'aa'"), ("f(None)", "0"), ("f(2)", "[][1]"))
    (g,) = sandbox.run_grids([_job(codes, tests)])
    assert [o.status for o in g.oracle] == [
        "valid",
        "wrong_prediction",
        "valid",
        "invalid",
        "wrong_prediction",
    ]
    assert g.oracle[3].reason == "TypeError" and "IndexError" in g.oracle[4].reason
    assert [c.status for c in g.code_status] == ["pass", "pass", "pass", "error"]
    assert "not defined" in g.code_status[3].reason
    assert _statuses(g)[0] == ["pass", "pass", "pass", "invalid", "pass"]
    assert _statuses(g)[1] == ["pass", "fail", "error", "invalid", "pass"]
    assert _statuses(g)[2] == ["error"] * 3 + ["invalid", "error"] and g.verdicts[2][0].reason == "KeyError"
    assert _statuses(g)[3] == ["invalid"] * 5 and g.verdicts[3][0].reason == "code did not load"


def test_reference_that_does_not_load_invalidates_every_test(sandbox: Sandbox) -> None:
    (g,) = sandbox.run_grids([_job((REF,), (("f(1)", "2"),), ref="raise ValueError\n")])
    assert g.oracle[0].status == "invalid" and "reference did not load" in g.oracle[0].reason
    assert g.verdicts[0][0].status == "invalid"


def test_float_tolerance_and_bool_strictness(sandbox: Sandbox) -> None:
    ref = "def f(x):\n    return x / 3\n"
    codes = (
        "def f(x):\n    return x / 3 + 1e-9\n",
        "def f(x):\n    return x / 3 + 1e-3\n",
        "def f(x):\n    return True\n",
    )
    (g,) = sandbox.run_grids([_job(codes, (("f(3)", "1.0"),), ref=ref)], rel_tol=1e-6, abs_tol=1e-6)
    assert _statuses(g) == [["pass"], ["fail"], ["fail"]]


def test_budgets_give_timeout_and_memory(sandbox: Sandbox) -> None:
    codes = ("def f(x):\n    while True:\n        pass\n", "def f(x):\n    return bytearray(1 << 40)\n",
             "while True:\n    pass\n")  # fmt: skip
    (g,) = sandbox.run_grids([_job(codes, (("f(1)", "2"),))])
    assert _statuses(g)[:2] == [["timeout"], ["memory"]]
    assert g.code_status[2].status == "timeout", g.code_status[2]
    assert _statuses(g)[2] == ["invalid"]


def test_identical_work_is_planned_once() -> None:
    cfg = SandboxConfig()
    jobs = [_job((REF, REF), (("f(1)", "2"), ("f(1)", "2"), ("f(2)", "2")), job_id=str(i)) for i in range(3)]
    oracle_plan = grid.plan_oracle(jobs, cfg)
    assert len(oracle_plan.tasks) == 1 and sorted(oracle_plan.tasks[0].exprs) == ["2", "f(1)", "f(2)"]


def test_deterministic_regardless_of_worker_count(sandbox: Sandbox) -> None:
    jobs = [
        _job((REF, "def f(x):\n    return x ** 2\n", "import random\ndef f(x):\n    return random.random()\n"),
             (("f(2)", "4"), ("f(3)", "6"), ("f(1)", "2")), job_id=str(i))
        for i in range(4)
    ]  # fmt: skip
    a = sandbox.run_grids(jobs)
    with Sandbox(SandboxConfig(workers=1, test_cpu_s=0.3)) as single:
        b = single.run_grids(list(reversed(jobs)))
    assert a == list(reversed(b))
    assert _statuses(a[0]) == [["pass"] * 3, ["pass", "fail", "fail"], ["fail"] * 3]


def test_run_checks(sandbox: Sandbox) -> None:
    harness = "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(-1) == -2\n"
    jobs = [
        CheckJob("ok", REF, "f", harness, cpu_s=1.0),
        CheckJob("bad", "def f(x):\n    return x + 2\n", "f", harness, cpu_s=1.0),
        CheckJob("raises", "def f(x):\n    return {}[x]\n", "f", harness, cpu_s=1.0),
        CheckJob("slow", "def f(x):\n    while True:\n        pass\n", "f", harness, cpu_s=0.3),
        CheckJob("noload", "def f(x)\n", "f", harness, cpu_s=1.0),
        CheckJob("badharness", REF, "f", "check = 3\n", cpu_s=1.0),
    ]
    got = [(v.status, v.reason) for v in sandbox.run_checks(jobs)]
    assert got[0] == ("pass", "") and got[1] == ("fail", "AssertionError") and got[2] == ("fail", "KeyError")
    assert got[3][0] == "timeout" and got[4] == ("error", "SyntaxError") and got[5][0] == "error"


def test_evalplus_reference_solutions_pass_their_harness(sandbox: Sandbox) -> None:
    if not DATA.exists():
        pytest.skip("shared evalplus parquet not available")
    import pyarrow.parquet as pq

    rows = pq.read_table(DATA).to_pylist()
    picked = [rows[0], rows[2], rows[200]]
    jobs = []
    for r in picked:
        info = r["extra_info"]
        body = r["GT_code"]
        code = (
            body
            if body.lstrip().startswith(("def ", "import", "from"))
            else info["function_declaration"] + "\n" + body
        )
        code = info["imports"] + "\n" + code
        jobs.append(CheckJob(info["question_id"], code, info["function_name"], r["test"], cpu_s=10.0))
    assert [v.status for v in sandbox.run_checks(jobs)] == ["pass"] * 3


def test_random_starts_alike_in_every_job_and_every_test(sandbox: Sandbox) -> None:
    code = "import random\nA = random.random()\ndef f(x):\n    return (A, random.random())\n"
    task = ProgramTask.make(code, "f", ("f(1)", "f(2)"), sandbox.config)
    first, second = sandbox.run_tasks([task, task])
    values = [e.value for e in first.exprs + second.exprs]
    assert len(set(values)) == 1 and values[0][0] != values[0][1]


STACK = (
    "class Stack:\n"
    "    def __init__(self):\n"
    "        self.items = []\n"
    "    def push(self, x):\n"
    "        self.items.append(x)\n"
    "        return len(self.items)\n"
)


def test_reference_classes_do_not_leak_into_candidates(sandbox: Sandbox) -> None:
    # Reference bug R3 (docs/algorithm.md):
    # the reference deleted only its functions before running the candidate,
    # so `x = 1` passed class-based tests. Here the reference and the candidate never share a process.
    by_class = GridJob(
        "class",
        STACK,
        "Stack",
        (STACK, "x = 1\n"),
        (TestCase("Stack().push(5)", "1"), TestCase("Stack().push(0)", "1")),
    )
    helper_ref = (
        STACK
        + "def push_all(xs):\n    s = Stack()\n    for x in xs:\n        s.push(x)\n    return s.items\n"
    )
    leaning = "def push_all(xs):\n    s = Stack()\n    for x in xs:\n        s.push(x)\n    return s.items\n"
    by_helper = GridJob(
        "helper", helper_ref, "push_all", (helper_ref, leaning), (TestCase("push_all([1, 2])", "[1, 2]"),)
    )
    g_class, g_helper = sandbox.run_grids([by_class, by_helper])
    assert [o.status for o in g_class.oracle] == ["valid", "valid"]
    assert [c.status for c in g_class.code_status] == ["pass", "error"]
    assert _statuses(g_class) == [["pass", "pass"], ["invalid", "invalid"]]
    assert g_helper.oracle[0].status == "valid"
    assert _statuses(g_helper) == [["pass"], ["error"]] and g_helper.verdicts[1][0].reason == "NameError"


NODE_REF = "class Node:\n    def __init__(self, v):\n        self.v = v\n\ndef mk(v):\n    return Node(v)\n"
NODE_CODES = {
    "correct": "class Node:\n    __slots__ = ('v',)\n    def __init__(self, v):\n        self.v = v\n"
    "    def __repr__(self):\n        return 'N'\n\ndef mk(v):\n    n = Node.__new__(Node)\n    n.v = v\n    return n\n",
    "off_by_one": "class Node:\n    def __init__(self, v):\n        self.v = v + 1\n\ndef mk(v):\n    return Node(v)\n",
    "extra_attribute": NODE_REF.replace("self.v = v", "self.v = v\n        self.seen = True"),
    "other_class": NODE_REF.replace("class Node", "class Knot").replace("return Node", "return Knot"),
    "cyclic": NODE_REF.replace("self.v = v", "self.v = v\n        self.me = [self]"),
    "lying_eq": "class Node:\n    def __init__(self, v):\n        self.v = None\n"
    "    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n\n"
    "def mk(v):\n    return Node(v)\n",
    "function": "def mk(v):\n    return lambda: v\n",
}


def test_objects_are_compared_by_class_and_attributes(sandbox: Sandbox) -> None:
    # Reference bug R2, object half (docs/algorithm.md):
    # objects were compared by identity (and their reprs carry
    # an address), so a correct candidate failed. Now: by class name and attributes.
    codes = tuple(NODE_CODES.values())
    tests = (("mk(1)", "Node(1)"), ("mk(2)", "Node(2)"), ("mk(3)", "Node(4)"), ("mk(3)", "mk"))
    (g,) = sandbox.run_grids(
        [GridJob("node", NODE_REF, "mk", codes, tuple(TestCase(c, p) for c, p in tests))]
    )
    assert [o.status for o in g.oracle] == ["valid", "valid", "wrong_prediction", "wrong_prediction"]
    assert g.oracle[3].reason == "prediction value has no inspectable state"
    assert all(c.status == "pass" for c in g.code_status)
    rows = dict(zip(NODE_CODES, _statuses(g), strict=True))
    assert rows["correct"] == ["pass"] * 4
    for name in ("off_by_one", "extra_attribute", "other_class", "cyclic", "lying_eq", "function"):
        assert rows[name] == ["fail"] * 4, name
    assert g.verdicts[list(NODE_CODES).index("function")][0].reason == "value has no inspectable state"


def test_oracle_with_no_inspectable_state_is_uncomparable(sandbox: Sandbox) -> None:
    ref = "import collections\ndef mk(v):\n    return collections.deque([v])\n"
    codes = (ref, "def mk(v):\n    return [v]\n")
    (g,) = sandbox.run_grids(
        [GridJob("q", ref, "mk", codes, (TestCase("mk(1)", "mk(1)"), TestCase("len(mk(1))", "1")))]
    )
    assert [(o.status, o.reason) for o in g.oracle] == [
        ("uncomparable", "value has no inspectable state"),
        ("valid", ""),
    ]
    assert _statuses(g) == [["invalid", "pass"], ["invalid", "pass"]]
    assert g.verdicts[1][0].reason == "oracle uncomparable: value has no inspectable state"


def test_cyclic_objects_compare_by_shape(sandbox: Sandbox) -> None:
    ring = (
        "class Ring:\n    def __init__(self, n):\n        self.n = n\n        self.next = self\n"
        "    def grow(self):\n        other = Ring(self.n + 1)\n        other.next, self.next = self.next, other\n"
        "        return self\n\ndef mk(n):\n    return Ring(n).grow()\n"
    )
    codes = (
        ring,
        ring.replace("return Ring(n).grow()", "return Ring(n)"),
        ring.replace("self.n + 1", "self.n + 2"),
    )
    (g,) = sandbox.run_grids([GridJob("ring", ring, "mk", codes, (TestCase("mk(1)", "mk(1)"),))])
    assert g.oracle[0].status == "valid"
    assert _statuses(g) == [["pass"], ["fail"], ["fail"]]
