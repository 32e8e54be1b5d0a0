"""Every mutation operator kind yields parseable programs that differ from the original."""

import ast

from codea1.eval.mutants import MUTANT_KINDS, generate_mutants

SOURCE = '''import math


def score(xs, k, flag=True):
    """Docstring that must never be mutated."""
    total = 0
    for x in xs[1:k:2]:
        if x > 0 and not x == 3:
            total += x * 2 - 1
        elif x in (4, 5) or x is None:
            total = total // 2
    return max(total, math.floor(k % 3)) if flag else -total
'''


def test_each_kind_produces_parseable_distinct_programs():
    mutants = generate_mutants(SOURCE)
    original = ast.unparse(ast.parse(SOURCE))
    kinds = {m.kind for m in mutants}
    assert kinds == set(MUTANT_KINDS)
    sources = [m.source for m in mutants]
    assert len(set(sources)) == len(sources)
    for m in mutants:
        tree = ast.parse(m.source)
        assert ast.unparse(tree) != original, m.description
        doc = ast.get_docstring(next(n for n in tree.body if isinstance(n, ast.FunctionDef)))
        assert doc == "Docstring that must never be mutated."


def test_specific_operators_apply():
    descriptions = {m.description.split(": ", 1)[1] for m in generate_mutants(SOURCE)}
    for expected in (
        "Mult -> Div",
        "Gt -> GtE",
        "And -> Or",
        "not removed",
        "return value -> None",
        "slice step removed",
        "call max: first two arguments swapped",
        "0 -> 1",
    ):
        assert expected in descriptions


def test_limit_is_round_robin_over_kinds_and_deterministic():
    first = generate_mutants(SOURCE, limit=len(MUTANT_KINDS))
    assert [m.kind for m in first] == list(MUTANT_KINDS)
    assert generate_mutants(SOURCE, limit=10) == generate_mutants(SOURCE, limit=10)


def test_mutants_change_behaviour_on_some_input():
    src = "def f(a, b):\n    return a + b if a < b else a - b\n"
    outputs = set()
    for m in generate_mutants(src):
        ns: dict = {}
        exec(m.source, ns)
        outputs.add(tuple(ns["f"](a, b) for a, b in [(1, 2), (3, 1), (2, 2)]))
    assert (3, 2, 0) not in outputs  # the original's behaviour is not among the mutants'
