"""Parsing of model responses: a table of realistic completions, broken ones included."""

from __future__ import annotations

import pytest

from codea1.data.parsing import extract_code, extract_tests, fenced_blocks, nonprintable_ratio

F = "```"
ADD = "def add(a, b):\n    return a + b"

# (name, response, entry point, expected code or None, expected reason ("" when code is found))
CODE_CASES = [
    ("python fence", f"{F}python\n{ADD}\n{F}", "add", ADD, ""),
    ("py fence (reference bug R5)", f"Here you go:\n{F}py\n{ADD}\n{F}\nDone.", "add", ADD, ""),
    ("plain fence (reference bug R5)", f"Sure!\n{F}\n{ADD}\n{F}", "add", ADD, ""),
    ("Python3 info string", f"{F}Python3\n{ADD}\n{F}", "add", ADD, ""),
    (
        "prose around the block",
        f"Let me think.\n\n{F}python\n{ADD}\n{F}\n\nThis adds two numbers.",
        "add",
        ADD,
        "",
    ),
    ("unterminated fence runs to the end", f"{F}python\n{ADD}\n", "add", ADD, ""),
    (
        "closing fence on the last code line",
        f"{F}python\ndef add(a, b):\n    return a + b{F}",
        "add",
        ADD,
        "",
    ),
    (
        "indented fence in a list",
        f"1. Code:\n   {F}python\n   {ADD.replace(chr(10), chr(10) + '   ')}\n   {F}",
        "add",
        ADD,
        "",
    ),
    (
        "first block defining the entry point wins",
        f"{F}python\ndef helper():\n    pass\n{F}\n{F}python\n{ADD}\n{F}\n{F}python\ndef add(a, b):\n    return 0\n{F}",
        "add",
        ADD,
        "",
    ),
    (
        "usage block before the definition",
        f"{F}python\nprint(add(1, 2))\n{F}\n{F}python\n{ADD}\n{F}",
        "add",
        ADD,
        "",
    ),
    (
        "helpers and imports kept",
        f"{F}python\nimport math\n\ndef _sq(x):\n    return x * x\n\ndef hyp(a, b):\n    return math.sqrt(_sq(a) + _sq(b))\n{F}",
        "hyp",
        "import math\n\ndef _sq(x):\n    return x * x\n\ndef hyp(a, b):\n    return math.sqrt(_sq(a) + _sq(b))",
        "",
    ),
    (
        "class entry point",
        f"{F}python\nclass Stack:\n    def push(self, x):\n        pass\n{F}",
        "Stack",
        "class Stack:\n    def push(self, x):\n        pass",
        "",
    ),
    (
        "method of a class problem",
        f"{F}python\nclass Solution:\n    def twoSum(self, nums, target):\n        return []\n{F}",
        "twoSum",
        "class Solution:\n    def twoSum(self, nums, target):\n        return []",
        "",
    ),
    ("lambda assignment", f"{F}python\nadd = lambda a, b: a + b\n{F}", "add", "add = lambda a, b: a + b", ""),
    (
        "async def",
        f"{F}python\nasync def add(a, b):\n    return a + b\n{F}",
        "add",
        "async def add(a, b):\n    return a + b",
        "",
    ),
    ("unfenced code", ADD, "add", ADD, ""),
    ("unfenced with leading prose", f"Here is the solution:\n{ADD}", "add", ADD, ""),
    ("unfenced with a one-word preamble that parses", f"Sure\n{ADD}", "add", ADD, ""),
    ("unfenced with trailing prose", f"{ADD}\n\nThis function returns the sum.", "add", ADD, ""),
    ("unfenced with import first", f"Solution:\nimport os\n{ADD}", "add", f"import os\n{ADD}", ""),
    (
        "nested only: not top level",
        f"{F}python\ndef outer():\n    {ADD.replace(chr(10), chr(10) + '    ')}\n{F}",
        "add",
        None,
        "no block defines add",
    ),
    ("empty response", "", "add", None, "no code"),
    ("whitespace only", "  \n\t\n", "add", None, "no code"),
    ("prose only", "I cannot solve this problem, sorry.", "add", None, "no code"),
    ("empty fence", f"{F}python\n{F}", "add", None, "no code"),
    # the opening fence forgotten, the closing one written (seen from LoRA-trained Qwen coders)
    ("stray closing fence after code", f"{ADD}\n{F}", "add", ADD, ""),
    (
        "stray closing fence after code and a usage line",
        f"{ADD}\n\n# Example\nprint(add(1, 2))  # 3\n{F}",
        "add",
        f"{ADD}\n\n# Example\nprint(add(1, 2))  # 3",
        "",
    ),
    ("stray fence after prose only", f"I cannot do this.\n{F}", "add", None, "no code"),
    (
        "only a non-python fence",
        f"{F}java\nint add(int a, int b) {{ return a + b; }}\n{F}",
        "add",
        None,
        "no code",
    ),
    (
        "syntax error in the defining block",
        f"{F}python\ndef add(a, b)\n    return a + b\n{F}",
        "add",
        None,
        "syntax error: expected ':' (line 1)",
    ),
    (
        "wrong function name",
        f"{F}python\ndef plus(a, b):\n    return a + b\n{F}",
        "add",
        None,
        "no block defines add",
    ),
    ("unfenced wrong function", "def plus(a, b):\n    return a + b", "add", None, "entry point not defined"),
    (
        "unfenced broken code",
        "def add(a, b):\n    return (a + b",
        "add",
        None,
        "syntax error: '(' was never closed (line 2)",
    ),
    (
        "unfenced, indented error is not cut",
        "def add(a, b):\n    x = 1\n    return a +\n",
        "add",
        None,
        "syntax error: invalid syntax (line 3)",
    ),
]


@pytest.mark.parametrize(
    ("response", "entry_point", "code", "reason"), [c[1:] for c in CODE_CASES], ids=[c[0] for c in CODE_CASES]
)
def test_extract_code_table(response: str, entry_point: str, code: str | None, reason: str) -> None:
    got = extract_code(response, entry_point)
    assert got.code == code
    assert got.reason == reason
    assert got.ok is (code is not None)


def test_reference_bug_r5_plain_and_py_fences_yield_runnable_code() -> None:
    """The reference passes such responses through whole (prose and fences) and gets a SyntaxError."""
    for fence in ("```", "```py"):
        response = f"Here is my answer.\n{fence}\n{ADD}\n```\nHope it helps!"
        got = extract_code(response, "add")
        assert got.code == ADD and "```" not in got.code and "Hope" not in got.code


# (name, response, expected tests as (call, predicted), expected rejection reasons)
TEST_CASES = [
    ("one block", f"{F}python\nassert f(1) == 2\nassert f(2) == 4\n{F}", [("f(1)", "2"), ("f(2)", "4")], []),
    ("assert with message", f"{F}python\nassert f(1) == 2, 'doubling'\n{F}", [("f(1)", "2")], []),
    ("operator != rejected (reference bug R6)", f"{F}python\nassert f(1) != 3\n{F}", [], ["operator"]),
    (
        "operators < in is rejected",
        f"{F}python\nassert f(1) < 3\nassert 2 in f(1)\nassert f(1) is None\nassert f(0) >= 0\n{F}",
        [],
        ["operator", "operator", "operator", "operator"],
    ),
    ("chained comparison rejected", f"{F}python\nassert f(1) == 2 == 2\n{F}", [], ["operator"]),
    (
        "bare truth test rejected",
        f"{F}python\nassert f(3)\nassert not f(0)\n{F}",
        [],
        ["operator", "operator"],
    ),
    (
        "left side not a call",
        f"{F}python\nassert f(1)[0] == 2\nassert 2 == f(1)\n{F}",
        [],
        ["not_call", "not_call"],
    ),
    (
        "no entry point",
        f"{F}python\nassert len([1]) == 1\nassert g(2) == 3\n{F}",
        [],
        ["no_entry_point", "no_entry_point"],
    ),
    (
        "entry point inside the call",
        f"{F}python\nassert sorted(f([3, 1])) == [1, 3]\n{F}",
        [("sorted(f([3, 1]))", "[1, 3]")],
        [],
    ),
    (
        "method call on a class entry point",
        f"{F}python\nassert Stack().push(5) == 1\n{F}",
        [("Stack().push(5)", "1")],
        [],
    ),
    (
        "duplicate after normalisation",
        f"{F}python\nassert f( 1 )==2\nassert f(1) == (2)\n{F}",
        [("f(1)", "2")],
        ["duplicate"],
    ),
    (
        "same call, different prediction is kept",
        f"{F}python\nassert f(1) == 2\nassert f(1) == 3\n{F}",
        [("f(1)", "2"), ("f(1)", "3")],
        [],
    ),
    (
        "multi-line assert",
        f"{F}python\nassert f(\n    [1, 2,\n     3],\n) == [\n    3, 2, 1,\n]\n{F}",
        [("f([1, 2, 3])", "[3, 2, 1]")],
        [],
    ),
    (
        "brackets inside strings and comments",
        f"{F}python\nassert f('(', \"[\") == ')'  # closes ]\nassert f('}}') == 1\n{F}",
        [("f('(', '[')", "')'"), ("f('}')", "1")],
        [],
    ),
    (
        "triple-quoted string across lines",
        f'{F}python\nassert f("""a\nb(""") == 2\n{F}',
        [("f('a\\nb(')", "2")],
        [],
    ),
    (
        "inside def test_ bodies",
        f"{F}python\nimport pytest\n\ndef test_basic():\n    assert f(1) == 2\n\ndef test_more():\n    assert f(\n        5\n    ) == 10\n{F}",
        [("f(1)", "2"), ("f(5)", "10")],
        [],
    ),
    (
        "name substitution in call arguments",
        f"{F}python\nnums = [1, 2, 3]\nk = 2\nassert f(nums, k=k) == 5\n{F}",
        [("f([1, 2, 3], k=2)", "5")],
        [],
    ),
    (
        "substitution of a bare-name expectation and chained names",
        f"{F}python\nbase = [4]\nxs = base\nexpected = 8\nassert f(xs) == expected\n{F}",
        [("f([4])", "8")],
        [],
    ),
    (
        "starred argument substitution",
        f"{F}python\nargs = (1, 2)\nassert f(*args) == 3\n{F}",
        [("f(*(1, 2))", "3")],
        [],
    ),
    (
        "undefined name stays (the oracle will judge it)",
        f"{F}python\nfor x in range(3):\n    assert f(x) == x\n{F}",
        [("f(x)", "x")],
        [],
    ),
    (
        "syntax error counted",
        f"{F}python\nassert f(1 == 2\nassert f(2) == 4\n{F}",
        [("f(2)", "4")],
        ["syntax"],
    ),
    (
        "broken line with an unclosed string",
        f"{F}python\nassert f('abc) == 1\nassert f(3) == 6\n{F}",
        [("f(3)", "6")],
        ["syntax"],
    ),
    (
        "several blocks concatenated",
        f"First:\n{F}python\nassert f(1) == 2\n{F}\nThen:\n{F}python\nassert f(2) == 4\n{F}",
        [("f(1)", "2"), ("f(2)", "4")],
        [],
    ),
    (
        "py and plain fences read too",
        f"{F}py\nassert f(1) == 2\n{F}\n{F}\nassert f(2) == 4\n{F}",
        [("f(1)", "2"), ("f(2)", "4")],
        [],
    ),
    (
        "no block: raw assert lines only",
        "Tests:\nassert f(1) == 2\nThe next one is tricky, isn't it?\n  assert f(\n  3) == 6\nassert f(0) != 1",
        [("f(1)", "2"), ("f(3)", "6")],
        ["operator"],
    ),
    ("no asserts at all", "I think the code is correct.", [], []),
    ("empty response", "", [], []),
    (
        "semicolon-separated asserts",
        f"{F}python\nassert f(1) == 2; assert f(2) == 4\n{F}",
        [("f(1)", "2"), ("f(2)", "4")],
        [],
    ),
    (
        "unterminated block",
        f"{F}python\nassert f(1) == 2\nassert f(2) == 4",
        [("f(1)", "2"), ("f(2)", "4")],
        [],
    ),
    (
        "float and nested data",
        f"{F}python\nassert f(0.1, {{'a': (1, 2)}}) == {{1.5, 2}}\n{F}",
        [("f(0.1, {'a': (1, 2)})", "{1.5, 2}")],
        [],
    ),
    ("keyword-only call", f"{F}python\nassert f(x=1, y=[2]) == None\n{F}", [("f(x=1, y=[2])", "None")], []),
]


@pytest.mark.parametrize(
    ("response", "tests", "reasons"), [c[1:] for c in TEST_CASES], ids=[c[0] for c in TEST_CASES]
)
def test_extract_tests_table(response: str, tests: list[tuple[str, str]], reasons: list[str]) -> None:
    entry = "Stack" if "Stack" in response else "f"
    got = extract_tests(response, entry)
    assert [(t.call, t.predicted) for t in got.tests] == tests
    assert [r.reason for r in got.rejected] == reasons


def test_reference_bug_r6_operator_is_not_rewritten() -> None:
    """The reference turns `assert f(x) != y` into `assert f(x) == y`; we reject it and say why."""
    got = extract_tests(f"{F}python\nassert f(1) != 5\nassert f(2) < 9\n{F}", "f")
    assert got.tests == ()
    assert got.rejected_by_reason() == {"operator": 2}
    assert got.rejected[0].text == "assert f(1) != 5"


def test_table_sizes() -> None:
    assert len(CODE_CASES) + len(TEST_CASES) >= 40


def test_fenced_blocks_marks_unterminated() -> None:
    blocks = fenced_blocks(f"{F}python\na = 1\n{F}\ntext\n{F}\nb = 2")
    assert [(b.lang, b.body, b.closed) for b in blocks] == [("python", "a = 1", True), ("", "b = 2", False)]


@pytest.mark.parametrize(
    ("text", "ratio"),
    [
        ("", 0.0),
        ("abc def\n", 0.0),
        ("ab\u00e9d", 0.25),
        ("\u4f60\u597d", 1.0),
        ("a\x00", 0.5),
        ("tab\there", 0.0),
    ],
)
def test_nonprintable_ratio(text: str, ratio: float) -> None:
    assert nonprintable_ratio(text) == pytest.approx(ratio)


def test_extraction_carries_nonprintable_ratio() -> None:
    assert extract_tests("assert f(1) == '\u00e9'", "f").nonprintable_ratio == pytest.approx(1 / 18)
