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
