"""Regression tests for the reference code's bugs (docs/algorithm.md, "Known bugs of the reference
code"), scored through the real sandbox.

Each test names the bug it guards; docs/algorithm.md lists them ("Reference bugs and their tests").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from codea1.config import RewardConfig, SandboxConfig
from codea1.replay.mistake_book import MistakeBook, MistakeHit, MistakeUpdate
from codea1.scoring import ProblemScore, ScoringItem, score_batch
from codea1.types import Problem, TestCase

local = pytest.importorskip("codea1.sandbox.local", reason="sandbox module not importable yet")

NODE_REF = "class Node:\n    def __init__(self, v):\n        self.v = v\n\n\ndef mk(v):\n    return Node(v)\n"
NODE_SUITE = "```python\nassert mk(1) == Node(1)\nassert mk(2) == Node(2)\n```"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[local.Sandbox]:
    with local.Sandbox(SandboxConfig(workers=2, test_cpu_s=0.5)) as sb:
        yield sb


def fenced(code: str) -> str:
    return f"```python\n{code}```"


def score_one(
    sandbox: local.Sandbox, problem: Problem, codes: tuple[str, ...], suites: tuple[str, ...]
) -> ProblemScore:
    item = ScoringItem(problem, tuple(fenced(c) for c in codes), tuple((s,) for s in suites))
    (s,) = score_batch([item], sandbox, reward=RewardConfig())
    assert s.error == ""
    return s


def book_after(tmp_path: Path, s: ProblemScore) -> list[tuple[str, int]]:
    with MistakeBook(tmp_path / "book.sqlite") as book:
        book.apply_step(1, [s.mistakes])
        return [(e.call, e.frequency) for e in book.entries()]


def test_correct_object_returning_code_scores_one_and_breaks_nothing(sandbox, tmp_path):
    # R2 (object half): objects without __eq__ compared by identity / address-bearing repr, so a
    # correct candidate scored 0 and both tests entered the book as bugs.
    code = "class Node:\n    def __init__(self, v):\n        self.v = v\n\n\ndef mk(v):\n    return Node(v)\n"
    s = score_one(sandbox, Problem("node", "q", "mk", NODE_REF), (code,), (NODE_SUITE,))
    assert [o.status for o in s.grid.oracle] == ["valid", "valid"]
    assert s.code_rewards == (1.0,)
    assert s.breakdowns[0].suites[0].invalid_by_reason == {}
    assert s.mistakes.failed == () and book_after(tmp_path, s) == []


WRONG_NODES = {
    "one attribute differs": "class Node:\n    def __init__(self, v):\n        self.v = -v\n",
    "cyclic": "class Node:\n    def __init__(self, v):\n        self.v = v\n        self.peer = Node.__new__(Node)\n"
    "        self.peer.peer = self\n",
    "lying __eq__": "class Node:\n    def __init__(self, v):\n        self.v = None\n"
    "    def __eq__(self, other):\n        return True\n",
}


@pytest.mark.parametrize("name", list(WRONG_NODES))
def test_wrong_objects_fail_and_are_recorded(sandbox, tmp_path, name):
    code = WRONG_NODES[name] + "\n\ndef mk(v):\n    return Node(v)\n"
    s = score_one(sandbox, Problem("node", "q", "mk", NODE_REF), (code,), (NODE_SUITE,))
    assert [o.status for o in s.grid.oracle] == ["valid", "valid"]
    assert [v.status for v in s.grid.verdicts[0]] == ["fail", "fail"]
    assert s.code_rewards == (0.0,)
    assert book_after(tmp_path, s) == [("mk(1)", 1), ("mk(2)", 1)]


def test_uncomparable_oracle_counts_neither_as_pass_nor_as_bug(sandbox, tmp_path):
    # A reference value with no inspectable state (a deque: C-implemented) cannot judge anyone:
    # such tests leave V_k, cost no validity, and never enter the Mistake Book.
    ref = "import collections\n\n\ndef window(xs):\n    return collections.deque(xs, maxlen=2)\n"
    wrong = "def window(xs):\n    return None\n"
    suite = "```python\nassert window([1, 2, 3]) == None\nassert window([]) == None\nassert len(window([1])) == 1\n```"
    s = score_one(sandbox, Problem("dq", "q", "window", ref), (ref, wrong), (suite, suite))
    assert [o.status for o in s.grid.oracle] == ["uncomparable", "uncomparable", "valid"]
    assert s.code_rewards == (1.0, 0.0)  # only len(...) counts: passed by code 0, an error for code 1
    for c in (0, 1):
        suite_reward = s.breakdowns[c].suites[0]
        assert suite_reward.n_valid == 1 and suite_reward.invalid_by_reason == {}
        assert s.ignored[c][0] == {"uncomparable": 2}
    assert [h.test.call for h in s.mistakes.failed] == ["len(window([1]))"]
    assert s.to_dict()["breakdown"]["codes"][1]["suites"][0]["ignored"] == {"uncomparable": 2}
    with MistakeBook(tmp_path / "book.sqlite") as book:  # the book refuses such tests outright
        report = book.apply_step(
            1, [MistakeUpdate("dq", failed=(MistakeHit(TestCase("window([])", "None"), 1, "uncomparable"),))]
        )
        assert report.skipped == 1 and book.entries() == []


def test_a_failing_import_does_not_touch_its_sibling(sandbox):
    # R4: imports were hoisted out of error handling and shared across samples, so one code's
    # missing module invalidated its siblings too.
    ref = "import math\n\n\ndef hyp(a, b):\n    return math.hypot(a, b)\n"
    broken = "import not_a_module_of_this_world\n\n\ndef hyp(a, b):\n    return (a * a + b * b) ** 0.5\n"
    suite = "```python\nassert hyp(3, 4) == 5.0\nassert hyp(0, 1) == 1.0\n```"
    s = score_one(sandbox, Problem("imp", "q", "hyp", ref), (broken, ref), (suite, suite))
    assert [c.status for c in s.grid.code_status] == ["error", "pass"]
    assert s.code_rewards == (0.0, 1.0)
    assert [o.status for o in s.grid.oracle] == ["valid", "valid"]  # the broken code's tests still validated
    assert s.breakdowns[0].suites[0].validity == pytest.approx(2 / 8)


def test_printed_markers_cannot_flip_results(sandbox):
    # R7: verdicts were read from stdout with substring matching, so with ≥ 11 tests a failed
    # test 1 counted as passed when test 10 passed, and a candidate could print the markers itself.
    ref = "def inc(x):\n    return x + 1\n"
    code = (
        "def inc(x):\n"
        "    print(''.join(f'__GEN_PASS__0_{i}\\n' for i in range(1, 12)))\n"
        "    return x + 1 if x else 7\n"
    )
    lines = ["assert inc(0) == 1"] + [f"assert inc({i}) == {i + 1}" for i in range(1, 11)]
    s = score_one(
        sandbox, Problem("inc", "q", "inc", ref), (code,), ("```python\n" + "\n".join(lines) + "\n```",)
    )
    suite = s.breakdowns[0].suites[0]
    assert (suite.n_valid, suite.passed, suite.failures_counted) == (11, 10, 1)
    assert s.code_rewards == (pytest.approx(10 / 11),)
