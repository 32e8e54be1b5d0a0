"""Pipelined calls: planned only for the evalplus harness shape, and verdicts exactly as unplanned."""

from __future__ import annotations

import pytest

from codea1.config import SandboxConfig
from codea1.sandbox import Sandbox
from codea1.sandbox.call_plan import planned_requests
from codea1.sandbox.worker.value_codec import decode
from codea1.types import CheckJob

EVALPLUS = """
def assertion(out, exp, atol):
    assert out == exp

def check(candidate):
    inputs = [[1], [2], [3], [4]]
    results = [2, 3, 4, 5]
    for i, (inp, exp) in enumerate(zip(inputs, results)):
        assertion(candidate(*inp), exp, 0)
"""


def test_the_evalplus_shape_is_planned_in_order() -> None:
    assert [decode(r) for r in planned_requests(EVALPLUS)] == [([1], {}), ([2], {}), ([3], {}), ([4], {})]


@pytest.mark.parametrize(
    "harness",
    [
        "def check(candidate):\n    assert candidate(1) == 2\n",
        EVALPLUS.replace("    for i,", "    candidate(0)\n    for i,"),  # another use of the candidate
        EVALPLUS.replace("assertion(candidate(*inp), exp, 0)", "assertion(candidate(*inp, 1), exp, 0)"),
        EVALPLUS.replace(
            "assertion(candidate(*inp), exp, 0)", "assertion(candidate(*inp), exp, 0)\n        break"
        ),
        EVALPLUS.replace("inputs = [[1], [2], [3], [4]]", "inputs = make_inputs()"),
        "def check(candidate):\n    inputs = [[1]]\n    for inp in []:\n        candidate(*inp)\n",
        "not python (",
    ],
)
def test_other_shapes_are_called_one_request_at_a_time(harness: str) -> None:
    assert planned_requests(harness) == ()


CODES = {
    "right": ("def f(x):\n    return x + 1\n", "pass"),
    "wrong at the third input": ("def f(x):\n    return x + 1 if x != 3 else 0\n", "fail"),
    "stateful": (
        "calls = []\ndef f(x):\n    calls.append(x)\n    return x + len(calls) // len(calls)\n",
        "pass",
    ),
    "stateful, wrong on the second call": (
        "n = [0]\ndef f(x):\n    n[0] += 1\n    return x + (n[0] != 2)\n",
        "fail",
    ),
    "slow after a wrong answer": (
        "def f(x):\n    if x > 1:\n        while True:\n            pass\n    return 0\n",
        "fail",
    ),
    "loops at the first input": ("def f(x):\n    while True:\n        pass\n", "timeout"),
}


@pytest.mark.parametrize("name", list(CODES))
def test_pipelined_verdicts_equal_one_call_at_a_time(name: str) -> None:
    code, want = CODES[name]
    unplanned = EVALPLUS.replace("for i, (inp, exp)", "for i, (inp, exp) in []: pass\n    for i, (inp, exp)")
    assert planned_requests(EVALPLUS) and not planned_requests(unplanned)
    with Sandbox(SandboxConfig(workers=1)) as sb:
        verdicts = sb.run_checks(
            [CheckJob("a", code, "f", EVALPLUS, 1.0), CheckJob("b", code, "f", unplanned, 1.0)]
        )
    assert [v.status for v in verdicts] == [want, want], verdicts
