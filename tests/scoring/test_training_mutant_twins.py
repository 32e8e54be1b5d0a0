"""No behavioural twins (issue 47, item 3): a training mutant that behaves like an evaluation mutant
on the golden calls and on seeded extra calls of the same types is left out of the draw. The five
twins the issue found on ``demo:easy-train``, through the real sandbox."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from codea1.config import SandboxConfig
from codea1.data.problems import load_problems
from codea1.eval.mutants import generate_mutants
from codea1.eval.typed_inputs import extra_calls
from codea1.sandbox import local
from codea1.training_mutants import MutantPool, draw_mutants

TWINS = {  # problem: (its evaluation mutant, the training mutants that behave exactly like it)
    "demo/easy/increment": ("x + 0", ("x * 1", "x // 1", "x ** 1")),
    "demo/easy/last_item": ("items[1]", ("items[+1]",)),
    "demo/easy/last_item ": ("items[-2]", ("items[~1]",)),
    "demo/easy/last_item  ": ("items[-0]", ("items[not 1]",)),
    "demo/easy/average": ("(a + b) / 0", ("(a - b) / 0",)),
}
NOT_TWINS = {"demo/easy/increment": ("x + 3", "x - 2"), "demo/easy/last_item": ("items[2]", "items[-3]"),
             "demo/easy/average": ("(a + b) / 4", "(a - b) * 2")}  # fmt: skip


def _body(source: str) -> str:
    return source.strip().splitlines()[-1].strip().removeprefix("return ")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[local.Sandbox]:
    with local.Sandbox(SandboxConfig(workers=2)) as sb:
        yield sb


def test_the_five_twins_of_the_issue_are_drawn_and_left_out(sandbox: local.Sandbox) -> None:
    problems = {p.id: p for p in load_problems("demo:easy-train")}
    chosen = [problems[pid] for pid in NOT_TWINS]
    pool = MutantPool(1000, 0)  # a budget above every candidate count: the whole pool is drawn
    live = {p.id: {_body(m) for m in found.programs} for p, found in
            zip(chosen, pool.live(chosen, sandbox, rel_tol=1e-6, abs_tol=1e-6), strict=True)}  # fmt: skip
    for key, (evaluation, twins) in TWINS.items():
        p = problems[key.strip()]
        assert evaluation in {_body(m.source) for m in generate_mutants(p.reference, limit=30)}
        drawn = {_body(m) for m in draw_mutants(p.reference, 1000, 0)}
        assert set(twins) <= drawn, (key, twins)  # the source-text check alone keeps them
        assert not set(twins) & live[p.id], (key, twins)
    for pid, kept in NOT_TWINS.items():
        assert set(kept) <= live[pid], (pid, kept)  # what differs from every evaluation mutant stays
    stats = pool.live(chosen, sandbox, rel_tol=1e-6, abs_tol=1e-6)[0].stats()
    assert stats["twins"] >= 3 and stats["filter_seconds"] == 0.0  # cached: filtered once per run


def test_extra_calls_keep_the_argument_types_and_are_seeded() -> None:
    calls = ["f(2, [1, 2])", "f(0, [])", "g(1)", "f(x)"]
    extra = extra_calls(calls, "f", "seed", per_call=3)
    assert (
        extra == extra_calls(calls, "f", "seed", per_call=3) != extra_calls(calls, "f", "other", per_call=3)
    )
    assert extra and not set(extra) & set(calls)
    for call in extra:
        args = eval(call.removeprefix("f"))  # noqa: S307 - the test's own literals
        assert isinstance(args[0], int) and isinstance(args[1], list)
        assert all(isinstance(x, int) for x in args[1])
    assert extra_calls(["f('Ab')", "f(True)"], "f", "s", per_call=2)[0].startswith("f('")
    assert all(c in ("f(True)", "f(False)") for c in extra_calls(["f(True)"], "f", "s", per_call=4))
