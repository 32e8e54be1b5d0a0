"""The program stream's shape is checked on the trusted side: forged records never count.

Unit tests feed :func:`parse_result` raw worker answers as the runner would collect them; the
sandbox tests run the forge of the issue that found the hole (a crafted load + test record written
to the report pipe before the function is defined) through the real sandbox in both modes.
"""

from __future__ import annotations

import pytest

from codea1.config import SandboxConfig
from codea1.sandbox import Sandbox
from codea1.sandbox.tasks import ProgramTask, parse_result
from codea1.sandbox.worker.value_codec import END_FRAME, RESULT_VALUE, TEST_RECORD, encode, frame
from codea1.types import CheckJob, GridJob, TestCase

TASK = ProgramTask("def f(x):\n    return x\n", "f", ("f(1)", "f(2)"))


def _load(status: str = "pass") -> bytes:
    return frame(encode(("load", status, "")))


def _test(i: int, value: object) -> bytes:
    return frame(b"T" + TEST_RECORD.pack(i, 0, 0.001, False) + frame(RESULT_VALUE + encode(value)))


def _parse(data: bytes) -> tuple[str, str, list[object]]:
    out = parse_result(TASK, {"data": data, "p_status": 0, "p_cpu": 0.0})
    return out.load_status, out.load_reason, [e.value if e.kind == "value" else e.kind for e in out.exprs]


def test_genuine_stream_gives_the_values() -> None:
    assert _parse(_load() + _test(0, 1) + _test(1, 2) + END_FRAME) == ("pass", "", [1, 2])


@pytest.mark.parametrize(
    "data, what",
    [
        (
            _load() + _test(0, 9) + END_FRAME + _load() + _test(0, 1) + _test(1, 2) + END_FRAME,
            "after the end",
        ),
        (_load() + _load() + _test(0, 1) + _test(1, 2) + END_FRAME, "record 1"),
        (_load() + _test(0, 9) + _test(0, 1) + _test(1, 2) + END_FRAME, "record 2"),
        (_load() + _test(1, 2) + _test(0, 1) + END_FRAME, "record 1"),
        (_load() + _test(0, 1) + END_FRAME, "end frame after 1 of 2"),
        (END_FRAME, "without a load report"),
        (_test(0, 1) + _load() + END_FRAME, "first record"),
        (_load("error") + _test(0, 1) + END_FRAME, "did not load"),
    ],
)
def test_any_other_shape_is_a_protocol_violation(data: bytes, what: str) -> None:
    status, reason, values = _parse(data)
    assert status == "error" and reason.startswith("protocol violation") and what in reason
    assert values == ["error", "error"]


def test_a_test_process_that_writes_two_results_gets_an_error() -> None:
    two = frame(RESULT_VALUE + encode(9)) + frame(RESULT_VALUE + encode(1))
    forged = frame(b"T" + TEST_RECORD.pack(0, 0, 0.001, False) + two)
    status, _, values = _parse(_load() + forged + _test(1, 2) + END_FRAME)
    assert status == "pass" and values == ["error", 2]


def test_a_cut_stream_is_a_dead_program_not_a_violation() -> None:
    status, _, values = _parse(_load() + _test(0, 1) + _test(1, 2)[:-3])
    assert status == "pass" and values[0] == 1 and values[1] == "error"


# The forge reported against `eval code --data humaneval`: a load record, a test record claiming
# None (the old harness mode's "check returned": pass) and an end frame, written before `def`.
ISSUE_FORGE = (
    "import os\n"
    "os.write(3, b'\\x1c\\x00\\x00\\x00t\\x03\\x00\\x00\\x00s\\x04\\x00\\x00\\x00loads\\x04\\x00\\x00\\x00passs"
    "\\x00\\x00\\x00\\x00\\x18\\x00\\x00\\x00T' + b'\\x00'*17 + b'\\x02\\x00\\x00\\x00oN\\x00\\x00\\x00\\x00')\n"
    "def truncate_number(number: float) -> float:\n    return 12345.0\n"
)
HUMANEVAL_2_TEST = (
    "def check(candidate):\n    assert candidate(3.5) == 0.5\n"
    "    assert abs(candidate(1.33) - 0.33) < 1e-6\n    assert abs(candidate(123.456) - 0.456) < 1e-6\n"
)
REFERENCE_2 = "def truncate_number(number: float) -> float:\n    return number % 1.0\n"


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    with Sandbox(SandboxConfig(workers=2, test_cpu_s=1.0, load_cpu_s=2.0)) as sb:
        yield sb


def test_the_reported_forge_fails_in_harness_and_grid_mode(sandbox: Sandbox) -> None:
    checks = [
        CheckJob("forge", ISSUE_FORGE, "truncate_number", HUMANEVAL_2_TEST, 2.0),
        CheckJob("honest", REFERENCE_2, "truncate_number", HUMANEVAL_2_TEST, 2.0),
    ]
    forge, honest = sandbox.run_checks(checks)
    assert forge.status in ("fail", "error") and honest.status == "pass"
    (grid,) = sandbox.run_grids(
        [
            GridJob(
                "g",
                REFERENCE_2,
                "truncate_number",
                (ISSUE_FORGE, REFERENCE_2),
                (TestCase("truncate_number(3.5)", "0.5"),),
            )
        ]
    )
    assert grid.verdicts[0][0].status != "pass" and grid.verdicts[1][0].status == "pass"


HARNESS_EQ = "def check(candidate):\n    assert candidate([1, 2]) == [2, 1]\n"


@pytest.mark.parametrize(
    "code, harness, want",
    [
        # an object that claims equality, or truth, never satisfies the harness
        ("class A:\n    def __eq__(s, o):\n        return True\ndef f(x):\n    return A()\n", HARNESS_EQ, "fail"),
        ("class A:\n    def __bool__(s):\n        return True\ndef f(x):\n    return A()\n",
         "def check(candidate):\n    assert candidate(1)\n", "fail"),
        # ... even when the harness swallows the exception its use raises
        ("class A:\n    def __eq__(s, o):\n        return True\ndef f(x):\n    return A()\n",
         "def check(candidate):\n    try:\n        assert candidate(1) == 2\n    except Exception:\n        pass\n", "fail"),
        # identity is allowed: MBPP/737's harness tests re.match results with `is not None`
        ("import re\ndef f(s):\n    return re.match('a', s)\n",
         "def check(candidate):\n    assert candidate('abc') is not None\n    assert candidate('xyz') is None\n", "pass"),
        # subclasses of plain types compare by their content (Counter == dict, as in Python)
        ("from collections import Counter\ndef f(s):\n    return Counter(s)\n",
         "def check(candidate):\n    assert candidate('aab') == {'a': 2, 'b': 1}\n", "pass"),
        ("class S(str):\n    def __eq__(s, o):\n        return True\n    __hash__ = str.__hash__\ndef f(x):\n    return S('no')\n",
         "def check(candidate):\n    assert candidate(1) == 'yes'\n", "fail"),
        # the harness may call the entry point by its name, and use its own helpers
        ("def f(x):\n    return x[::-1]\n", "def check(candidate):\n    assert f([1, 2]) == [2, 1]\n", "pass"),
        ("def f(x):\n    return x\n", "def f(x):\n    return [9]\ndef check(candidate):\n    assert candidate([9]) == f(0)\n", "pass"),
        # an exception raised by the candidate reaches the harness as that builtin type
        ("def f(x):\n    raise ValueError('no')\n",
         "def check(candidate):\n    try:\n        candidate(1)\n    except ValueError:\n        return\n    assert False\n", "pass"),
        ("import time\ndef f(x):\n    time.sleep(60)\n", HARNESS_EQ, "timeout"),
    ],
)  # fmt: skip
def test_harness_mode_decides_on_plain_values_only(
    sandbox: Sandbox, code: str, harness: str, want: str
) -> None:
    (verdict,) = sandbox.run_checks([CheckJob("j", code, "f", harness, 1.0)])
    assert verdict.status == want, verdict
