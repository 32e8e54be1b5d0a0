"""CPU budgets of any size either work or are refused before anything runs."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from codea1.config import SandboxConfig
from codea1.sandbox import Sandbox
from codea1.sandbox.tasks import ProgramTask
from codea1.types import CheckJob, GridJob, TestCase

REF = "def f(x):\n    return x * 2\n"
HARNESS = "def check(candidate):\n    assert candidate(2) == 4\n"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(SandboxConfig(workers=1)) as sb:
        yield sb


@pytest.mark.parametrize("cpu_s", [10.0, 16.0, 40.0, 135.0, 600.0])
def test_check_budget_above_the_load_budget_runs(sandbox: Sandbox, cpu_s: float) -> None:
    (v,) = sandbox.run_checks([CheckJob("big", REF, "f", HARNESS, cpu_s=cpu_s)])
    assert (v.status, v.reason) == ("pass", "")


def test_grid_with_large_budgets_runs() -> None:
    job = GridJob("g", REF, "f", (REF, "def f(x):\n    return x\n"), (TestCase("f(3)", "6"),))
    with Sandbox(SandboxConfig(workers=1, test_cpu_s=50.0, load_cpu_s=30.0)) as sb:
        (g,) = sb.run_grids([job])
    assert [o.status for o in g.oracle] == ["valid"]
    assert [[v.status for v in row] for row in g.verdicts] == [["pass"], ["fail"]]


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, 1e7])
def test_unusable_budgets_are_refused_before_running(bad: float) -> None:
    with pytest.raises(ValueError, match="cpu_s"):
        ProgramTask.make(REF, "f", ("f(1)",), SandboxConfig(), test_cpu_s=bad)
    with pytest.raises(ValueError, match="cpu_s"):
        ProgramTask.make(REF, "f", ("f(1)",), SandboxConfig(), load_cpu_s=bad)


def test_sandbox_refuses_an_unusable_config() -> None:
    for cfg in (
        SandboxConfig(test_cpu_s=0.0),
        SandboxConfig(load_cpu_s=math.nan),
        SandboxConfig(wall_factor=0.5),
    ):
        with pytest.raises(ValueError):
            Sandbox(cfg)


def test_check_with_an_unusable_budget_is_refused(sandbox: Sandbox) -> None:
    with pytest.raises(ValueError, match="cpu_s"):
        sandbox.run_checks([CheckJob("neg", REF, "f", HARNESS, cpu_s=-3.0)])


@pytest.mark.slow
def test_check_burning_twelve_cpu_seconds_passes_within_forty(sandbox: Sandbox) -> None:
    burn = (
        "import time\n"
        "def check(candidate):\n"
        "    t = time.process_time()\n"
        "    while time.process_time() - t < 12.0:\n"
        "        sum(range(10000))\n"
        "    assert candidate(2) == 4\n"
    )
    (v,) = sandbox.run_checks([CheckJob("burn", REF, "f", burn, cpu_s=40.0)])
    assert (v.status, v.reason) == ("pass", "")
