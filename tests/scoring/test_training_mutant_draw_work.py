"""The training-mutant draw's work is bounded by its budget, not by the reference's size (issue 45,
item 14: a reference with a 200-entry table built every second-order mutant, 100 s and more)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import codea1.eval.cosmic_mutants as cosmic_mutants
import codea1.eval.mutants as ast_mutants
from codea1.eval.mutants import generate_mutants, mutation_sites
from codea1.training_mutants import BUILT_PER_MUTANT, MIN_BUILT, draw_mutants

TABLE = (
    "def lookup(k):\n    table = {"
    + ", ".join(f"{i}: {7 * i + 3}" for i in range(200))
    + "}\n    return table.get(k, -1)\n"
)


class Built:
    """Counts every mutant built, by either mutator; fails at once past ``bound``."""

    def __init__(self, bound: int) -> None:
        self.bound, self.count = bound, 0

    def tick(self) -> None:
        self.count += 1
        if self.count > self.bound:
            raise AssertionError(f"the draw built more than {self.bound} mutants")


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], Built]:
    def install(bound: int) -> Built:
        counter = Built(bound)
        apply = ast_mutants._apply

        def counted_apply(source: str, target: int) -> Any:
            if target >= 0:
                counter.tick()
            return apply(source, target)

        library = cosmic_mutants._library

        def counted_library() -> Any:
            plugins, nodes, mutate_code = library()

            def counted_mutate(*args: Any) -> Any:
                counter.tick()
                return mutate_code(*args)

            return plugins, nodes, counted_mutate

        monkeypatch.setattr(ast_mutants, "_apply", counted_apply)
        monkeypatch.setattr(cosmic_mutants, "_library", counted_library)
        return counter

    return install


def test_a_200_entry_table_is_drawn_with_work_bounded_by_the_budget(built: Callable[[int], Built]) -> None:
    first_order = mutation_sites(TABLE)  # the reference's own mutants: the forbidden set needs them all
    evaluation = {m.source for m in generate_mutants(TABLE)}
    assert first_order > 400
    budget = 16
    counter = built(first_order + max(MIN_BUILT, BUILT_PER_MUTANT * budget))
    drawn = draw_mutants(TABLE, budget, 0)
    assert counter.count <= counter.bound
    assert len(drawn) == budget == len(set(drawn))
    assert not set(drawn) & evaluation  # no evaluation mutant
