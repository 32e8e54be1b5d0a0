"""The exploit suite: every attack contained, neighbours unaffected, nothing left behind."""

from __future__ import annotations

import pytest

from codea1.config import SandboxConfig
from codea1.sandbox import Sandbox
from codea1.sandbox.attacks import ATTACKS, run_suite


def test_suite_is_large_enough() -> None:
    assert len(ATTACKS) >= 25
    assert len({a.name for a in ATTACKS}) == len(ATTACKS)


@pytest.mark.slow
def test_every_attack_is_contained() -> None:
    with Sandbox(SandboxConfig(workers=2, test_cpu_s=0.5, load_cpu_s=2.0)) as sandbox:
        results = run_suite(sandbox)
        escaped = [f"{r.name}: {r.detail} [{r.verdicts}]" for r in results if not r.contained]
        assert not escaped, "\n".join(escaped)
        assert {r.name for r in results} >= {a.name for a in ATTACKS} | {
            "neighbours_unaffected",
            "no_leftover_processes",
        }
        # the workers are still healthy afterwards
        from codea1.types import GridJob, TestCase

        (g,) = sandbox.run_grids(
            [
                GridJob(
                    "after",
                    "def f(x):\n    return x\n",
                    "f",
                    ("def f(x):\n    return x\n",),
                    (TestCase("f(5)", "5"),),
                )
            ]
        )
        assert g.verdicts[0][0].status == "pass"
