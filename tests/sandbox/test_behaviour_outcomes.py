"""Outcomes that are not behaviour (issue 45, item 2): identity of results, memory addresses, the
recursion depth a test leaves the entry point, names only the reference defines; and the second
oracle run on a behaviour-preserving variant of the reference that catches what reads the program's
text, bytecode or addresses. Each class beside an honest control that stays valid."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from codea1.config import SandboxConfig
from codea1.sandbox import grid
from codea1.sandbox.reference_variant import HEADER, NO_OP, calls_on_literals, variant
from codea1.sandbox.test_guard import refusal
from codea1.sandbox.test_names import foreign_name, helper_source, problem_job, question_names, reference_only
from codea1.types import GridJob, Problem, TestCase

pytest.importorskip("codea1.sandbox.local", reason="sandbox module not importable")
from codea1.sandbox.local import Sandbox  # noqa: E402


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(SandboxConfig(workers=2, test_cpu_s=1.0, load_cpu_s=1.0)) as sb:
        yield sb


def _run(sandbox: Sandbox, job: GridJob) -> tuple[list[tuple[str, str]], list[str]]:
    (g,) = sandbox.run_grids([job])
    return [(o.status, o.reason) for o in g.oracle], [v.status for v in g.verdicts[0]]


@pytest.mark.parametrize(
    "call", ["bool(f(300) is f(300))", "(lambda a: a is not f(1))(f(1))", "f(1) is None is f(2) is f(3)"]
)
def test_identity_comparisons_are_refused(call: str) -> None:
    assert refusal(call, "f") == "test compares identities (is)"


@pytest.mark.parametrize("call", ["bool(f(1) is None)", "bool(f(1) is not None)", "bool(None is f(1))"])
def test_comparisons_with_none_true_false_are_kept(call: str) -> None:
    assert refusal(call, "f") == ""


def test_cached_results_are_not_an_outcome(sandbox: Sandbox) -> None:
    cached = "import functools\n@functools.lru_cache\ndef f(n):\n    return [n]\n"
    job = GridJob("is", cached, "f", ("def f(n):\n    return [n]\n",),
                  (TestCase("bool(f(300) is f(300))", "True"), TestCase("f(300)", "[300]")))  # fmt: skip
    oracle, verdicts = _run(sandbox, job)
    assert oracle == [("invalid", "test compares identities (is)"), ("valid", "")]
    assert verdicts == ["invalid", "pass"]


def test_addresses_make_a_test_invalid(sandbox: Sandbox) -> None:
    """The address of an object the test makes, or the default repr of a result: each differs on
    the variant's run in a shifted heap; the honest string tests beside them stay valid."""
    echo = "def f(s):\n    return s\n"
    job = GridJob("addr", echo, "f", (echo,), (TestCase("f(repr(object()))", "''"),
                  TestCase("f(repr([1, 2]))", "'[1, 2]'"), TestCase("f(str(3) * 2)", "'33'")))  # fmt: skip
    oracle, verdicts = _run(sandbox, job)
    assert oracle == [("invalid", grid.VARIANT_DIFFERS), ("valid", ""), ("valid", "")]
    assert verdicts == ["invalid", "pass", "pass"]
    node = "class Node:\n    def __init__(self, v):\n        self.v = v\n\ndef f(x):\n    return Node(x)\n"
    job = GridJob(
        "repr", node, "f", (node,), (TestCase("repr(f(1))", "''"), TestCase("[f(1).v, f(2).v]", "[1, 2]"))
    )
    oracle, verdicts = _run(sandbox, job)
    assert oracle[0] == ("invalid", grid.VARIANT_DIFFERS) and oracle[1] == ("valid", "")
    assert verdicts == ["invalid", "pass"]


def test_a_test_that_recursed_first_leaves_a_recursive_entry_point_its_room(sandbox: Sandbox) -> None:
    """The reference is iterative, the candidate recursive and correct: a test that stacks 900
    frames of its own before calling f(95) used to make the candidate raise RecursionError."""
    deep = "(lambda g: g(g, 900))(lambda g, k: g(g, k - 1) if k else f(95))"
    recursive = "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\n"
    job = GridJob("rec", "def f(n):\n    return n\n", "f", (recursive,),
                  (TestCase(deep, "95"), TestCase("f(95)", "95"), TestCase("[f(k) for k in range(3)]", "[0, 1, 2]")))  # fmt: skip
    oracle, verdicts = _run(sandbox, job)
    assert oracle == [("valid", "")] * 3
    assert verdicts == ["pass", "pass", "pass"]
    # a call that really needs more depth than the limit still fails the recursive candidate
    job = GridJob("rec2", "def f(n):\n    return n\n", "f", (recursive,), (TestCase("f(5000)", "5000"),))
    assert _run(sandbox, job)[1] == ["error"]


def test_question_names_come_from_the_question_and_the_imports() -> None:
    humaneval = Problem(id="h", question="from typing import List\n\ndef is_palindrome(s: str) -> bool:\n"
                        "    return s == s[::-1]\n\ndef f(s: str) -> str:\n    \"\"\"Doc.\"\"\"\n",
                        entry_point="f", reference="", imports="import math")  # fmt: skip
    assert question_names(humaneval) == {"List", "is_palindrome", "f", "math"}
    stub = Problem(id="s", question="import re\ndef f(x: int) -> int:\n", entry_point="f", reference="")
    assert question_names(stub) == {"re", "f"}
    prose = Problem(id="p", question="Use this:\n```python\nclass TreeNode:\n    pass\n```\nWrite f.",
                    entry_point="f", reference="")  # fmt: skip
    assert question_names(prose) == {"TreeNode"}


def test_names_only_the_reference_defines_are_refused() -> None:
    ref = "import heapq\nfrom math import gcd as g\nMOD = 7\n\ndef helper(x):\n    return x\n\ndef f(x):\n    return helper(x)\n"
    own = reference_only(ref, "f", frozenset({"TreeNode"}))
    assert own == {"heapq", "g", "MOD", "helper"}
    assert (
        foreign_name("f(helper(1))", own)
        == "test uses helper, which only the reference defines (not the question)"
    )
    assert foreign_name("f(MOD)", own).startswith("test uses MOD")
    for honest in ("f(1)", "f(TreeNode())", "f([x for x in range(3)], key=lambda v: -v)", "f(len('ab'))"):
        assert foreign_name(honest, own) == ""


def test_a_test_using_the_references_helper_is_invalid_not_a_failure(sandbox: Sandbox) -> None:
    ref = "def helper(x):\n    return x * 2\n\ndef f(x):\n    return helper(x) + 1\n"
    tests = (TestCase("f(helper(1))", "5"), TestCase("f(len([1]))", "3"))
    job = GridJob("help", ref, "f", ("def f(x):\n    return 2 * x + 1\n",), tests, frozenset({"f"}))
    oracle, verdicts = _run(sandbox, job)
    assert oracle == [
        ("invalid", "test uses helper, which only the reference defines (not the question)"),
        ("valid", ""),
    ]
    assert verdicts == ["invalid", "pass"]
    # a helper the question provides stays usable
    job = GridJob("help", ref, "f", (ref,), tests, frozenset({"f", "helper"}))
    assert _run(sandbox, job) == ([("valid", "")] * 2, ["pass", "pass"])


def test_the_variant_behaves_like_the_reference_and_differs_in_text_and_bytecode() -> None:
    ref = ('import math\n\ndef helper(x):\n    """doc"""\n    return x * 2\n\nclass A:\n    def m(self):\n'
           '        return 3\n\ndef f(x): return helper(x) + A().m()\n\ndef g():\n    """only a docstring"""\n')  # fmt: skip
    text = variant(ref)
    assert text is not None and text.startswith(HEADER) and text.count(NO_OP) == 2
    a: dict = {}
    b: dict = {}
    exec(compile(ref, "<ref>", "exec"), a)  # noqa: S102 - trusted test input
    exec(compile(text, "<variant>", "exec"), b)  # noqa: S102
    assert a["f"](4) == b["f"](4) == 11 and b["g"].__doc__ == "only a docstring"
    assert a["helper"].__code__.co_code != b["helper"].__code__.co_code
    assert a["f"].__code__.co_firstlineno != b["f"].__code__.co_firstlineno
    assert variant("def f(:\n") is None


@pytest.mark.parametrize(
    ("call", "literal"),
    [("f(1, [2, 'a'], k=-3)", True), ("f(f(2))", True), ("f(2 ** 10, *[1])", True), ("f(x)", False),
     ("sorted(f(1))", False), ("f(lambda: 1)", False), ("o.f(1)", False), ("f([i for i in range(3)])", False)],
)  # fmt: skip
def test_only_calls_on_literals_skip_the_second_run(call: str, literal: bool) -> None:
    assert calls_on_literals(call, "f") is literal


def test_what_the_static_check_misses_the_variant_run_catches(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the host's parse switched off, a test that reads a function's bytecode or line numbers
    passes on the reference (its prediction reads them too) and fails a correct candidate written
    otherwise: its outcome on the variant differs, so it is invalid; an honest test is not."""
    monkeypatch.setattr(grid, "refusal", lambda call, entry_point: "")
    ref = "def helper(x):\n    return x + 1\n\ndef f(x):\n    return helper(x)\n"
    other = "def helper(x):\n    return 1 + x\n\n\ndef f(x):\n    return x + 1\n"
    tests = (
        TestCase("f(len(helper.__code__.co_code))", "len(helper.__code__.co_code) + 1"),
        TestCase("f(helper.__code__.co_firstlineno)", "helper.__code__.co_firstlineno + 1"),
        TestCase("f(sum([1, 2]))", "4"),
    )
    oracle, verdicts = _run(sandbox, GridJob("intro", ref, "f", (other,), tests))
    assert oracle == [("invalid", grid.VARIANT_DIFFERS)] * 2 + [("valid", "")]
    assert verdicts == ["invalid", "invalid", "pass"]


def test_helper_source_is_the_questions_imports_and_helper_functions() -> None:
    question = (
        "from typing import List\nimport math\n\nclass Node:\n    pass\n\nLIMIT = 3\n\n"
        "def is_sorted(xs: List[int]) -> bool:\n    return all(a <= b for a, b in zip(xs, xs[1:]))\n\n"
        'def todo(x):\n    """Write me."""\n    raise NotImplementedError\n\n'
        'def also_todo(x):\n    ...\n\ndef f(xs: List[int]) -> List[int]:\n    """Sort xs."""\n'
    )
    p = Problem(id="q", question=question, entry_point="f", reference="", imports="import heapq")
    source = helper_source(p)
    ns: dict = {}
    exec(compile(source, "<question>", "exec"), ns)  # noqa: S102 - trusted test input
    assert {k for k in ns if not k.startswith("__")} == {"heapq", "List", "math", "is_sorted"}
    assert ns["is_sorted"]([1, 2]) and not ns["is_sorted"]([2, 1])
    prose = Problem(id="p", question="Given:\n```python\ndef sq(x):\n    return x * x\n```\nWrite f.",
                    entry_point="f", reference="")  # fmt: skip
    assert helper_source(prose) == "def sq(x):\n    return x * x\n"
    assert helper_source(Problem(id="n", question="Write f(x).", entry_point="f", reference="")) == ""
    job = problem_job(p, ("c",), (TestCase("f([1])", "[1]"),))
    assert (job.id, job.reference, job.codes) == ("q", "", ("c",))
    assert job.question_names == question_names(p) and job.question_helpers == source
    assert problem_job(p, (), (), job_id="m", reference="r").reference == "r"


IS_SORTED = "def is_sorted(xs):\n    return all(a <= b for a, b in zip(xs, xs[1:]))\n"


def test_a_candidate_that_redefines_a_question_helper_does_not_pass_with_it(sandbox: Sandbox) -> None:
    """The question provides ``is_sorted``; a wrong candidate that redefines it to say True used to
    pass ``is_sorted(f(x))``. The test now calls the question's definition: the wrong candidate
    fails, correct ones pass with their own ``is_sorted`` or none, and the reference's outcomes
    are the ones it had before (it defines the same helper)."""
    question = IS_SORTED + '\ndef f(xs):\n    """Sort xs."""\n'
    ref = IS_SORTED + "\ndef f(xs):\n    return sorted(xs)\n"
    problem = Problem(id="sort", question=question, entry_point="f", reference=ref)
    wrong = "def is_sorted(xs):\n    return True\n\ndef f(xs):\n    return list(xs)\n"
    own_copy = "def is_sorted(xs):\n    return list(xs) == sorted(xs)\n\ndef f(xs):\n    return sorted(xs)\n"
    no_copy = "def f(xs):\n    out = list(xs)\n    out.sort()\n    return out\n"
    tests = (TestCase("is_sorted(f([3, 1, 2]))", "True"), TestCase("f([2, 1])", "[1, 2]"))
    job = problem_job(problem, (wrong, own_copy, ref), tests)
    (g,) = sandbox.run_grids([job])
    assert [o.status for o in g.oracle] == ["valid", "valid"]
    assert [[v.status for v in row] for row in g.verdicts] == [
        ["fail", "fail"],
        ["pass", "pass"],
        ["pass", "pass"],
    ]
    (g,) = sandbox.run_grids([problem_job(problem, (no_copy,), tests)])
    assert [v.status for v in g.verdicts[0]] == ["pass", "pass"]
    # the same job without the trusted copy: the reference's oracle is the same
    (old,) = sandbox.run_grids([GridJob("sort", ref, "f", (ref,), tests, job.question_names)])
    assert old.oracle == g.oracle
