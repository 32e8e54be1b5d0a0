"""The demo problem set shipped in the package."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter

import pytest

from codea1.data.problems import load_problems
from codea1.types import Problem

DEMO = load_problems("demo")


def test_demo_size_splits_and_metadata() -> None:
    assert len(DEMO) >= 60
    splits = Counter(p.split for p in DEMO)
    assert splits == {"train": 48, "heldout": 16}
    assert [p.split for p in load_problems("demo:train")] == ["train"] * 48
    assert [p.split for p in load_problems("demo:heldout")] == ["heldout"] * 16
    assert {p.metadata["difficulty"] for p in DEMO} == {"easy", "medium", "hard"}
    assert len({p.metadata["topic"] for p in DEMO}) >= 5
    assert {p.source for p in DEMO} == {"demo"}


@pytest.mark.parametrize("problem", DEMO, ids=[p.id for p in DEMO])
def test_demo_problem_shape(problem: Problem) -> None:
    assert problem.question.startswith(f"def {problem.entry_point}(") and ">>>" in problem.question
    assert len(problem.golden_tests) >= 5
    for test in problem.golden_tests:
        node = ast.parse(test).body[0]
        assert isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare)
        assert isinstance(node.test.ops[0], ast.Eq) and problem.entry_point in ast.unparse(node.test.left)


@pytest.mark.parametrize("problem", DEMO, ids=[p.id for p in DEMO])
def test_demo_reference_passes_its_golden_tests(problem: Problem) -> None:
    """Run in a fresh interpreter per problem; every golden test is reported separately."""
    program = (
        problem.reference
        + "\nfailed = []\n"
        + "".join(
            f"try:\n    exec({t!r})\nexcept Exception as e:\n    failed.append(({t!r}, repr(e)))\n"
            for t in problem.golden_tests
        )
        + "PLAIN = (type(None), bool, int, float, str, list, tuple, dict, set)\n"
        + "".join(
            f"assert isinstance({ast.unparse(ast.parse(t).body[0].test.left)}, PLAIN), {t!r}\n"  # type: ignore[attr-defined]
            for t in problem.golden_tests
        )
        + "assert not failed, failed\n"
    )
    result = subprocess.run([sys.executable, "-"], input=program, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr[-1500:]


def test_easy_demo_splits_are_disjoint_and_their_references_pass_their_asserts() -> None:
    train, heldout = load_problems("demo:easy-train"), load_problems("demo:easy-heldout")
    assert (len(train), len(heldout)) == (12, 9)
    assert not {p.id for p in train} & {p.id for p in heldout}
    assert [p.id for p in load_problems("demo:easy")] == [p.id for p in train + heldout]
    assert {p.split for p in train} == {"easy-train"} and {p.split for p in heldout} == {"easy-heldout"}
    assert not {p.id for p in train + heldout} & {p.id for p in DEMO}
    for p in train + heldout:
        ns: dict = {}
        exec(p.reference, ns)
        for test in p.golden_tests:
            exec(test, ns)
