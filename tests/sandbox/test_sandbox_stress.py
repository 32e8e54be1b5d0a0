"""10,000 pairs with 1 % timeouts: correct counts and no process left behind."""

from __future__ import annotations

import pytest

from codea1.config import SandboxConfig
from codea1.sandbox import Sandbox
from codea1.sandbox.attacks import wait_for_no_strays
from codea1.types import GridJob, TestCase


@pytest.mark.slow
def test_ten_thousand_pairs_leave_nothing_behind() -> None:
    jobs = []
    for p in range(100):
        ref = f"def f(x):\n    return x * {p + 2}\n"
        codes = [ref] + [f"def f(x):\n    return x * {p + 2} + {k} // 5\n" for k in range(8)]
        codes.append(f"def f(x):\n    while x == 7:\n        pass\n    return x * {p + 2}\n")
        tests = tuple(TestCase(f"f({t})", str(t * (p + 2))) for t in range(10))
        jobs.append(GridJob(f"p{p}", ref, "f", tuple(codes), tests))
    with Sandbox(SandboxConfig(test_cpu_s=0.2, wall_factor=5.0)) as sandbox:
        grids = sandbox.run_grids(jobs)
        assert not wait_for_no_strays(sandbox.worker_pids())
    counts: dict[str, int] = {}
    for g in grids:
        for row in g.verdicts:
            for v in row:
                counts[v.status] = counts.get(v.status, 0) + 1
    assert sum(counts.values()) == 10_000
    assert counts["timeout"] == 100
    assert counts["fail"] == 100 * 10 * 3  # k in 5..7 shift by 1; k = 8.. none (k < 8)
    assert counts["pass"] == 10_000 - 100 - 3000
