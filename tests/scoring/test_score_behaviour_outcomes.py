"""Tests that do not judge behaviour earn nothing anywhere (issue 45, items 3 and 4): they never
enter the Mistake Book, a stored one is removed when its replay is refused, and the mutation term
pays nothing for a test that reads the function's bytecode, beside an honest suite that earns it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from codea1.config import RewardConfig, SandboxConfig
from codea1.replay.mistake_book import MistakeBook, MistakeHit, MistakeUpdate
from codea1.sandbox.grid import VARIANT_DIFFERS
from codea1.scoring import ScoringItem, score_batch
from codea1.types import Problem, TestCase

pytest.importorskip("codea1.sandbox.local", reason="sandbox module not importable")
from codea1.sandbox.local import Sandbox  # noqa: E402

REF = "def helper(x):\n    return x * 2\n\ndef f(x):\n    return helper(x) + 1\n"
BUGGY = "```python\ndef f(x):\n    return 2 * x\n```"
PROBLEM = Problem(id="p", question="def f(x: int) -> int:\n    \"\"\"2x + 1.\"\"\"\n", entry_point="f", reference=REF,
                  golden_tests=("assert f(1) == 3", "assert f(4) == 9"))  # fmt: skip
HOSTILE = TestCase("f(helper(1))", "5")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(SandboxConfig(workers=2, test_cpu_s=1.0, load_cpu_s=1.0)) as sb:
        yield sb


def test_a_refused_test_never_enters_the_book_and_a_stored_one_is_removed_on_replay(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    suite = "```python\nassert f(helper(1)) == 5\nassert f(2) == 5\n```"
    (score,) = score_batch([ScoringItem(PROBLEM, (BUGGY,), ((suite,),))], sandbox, reward=RewardConfig())
    oracle = {t.call: o for t, o in zip(score.tests, score.grid.oracle, strict=True)}
    assert oracle["f(helper(1))"].status == "invalid" and oracle["f(2)"].status == "valid"
    assert [h.test.call for h in score.mistakes.failed] == ["f(2)"]  # the refused one is not stored
    with MistakeBook(tmp_path / "book.sqlite") as book:  # a book written under the old rules holds it
        book.apply_step(
            1, [MistakeUpdate("p", failed=(MistakeHit(HOSTILE, 3), MistakeHit(TestCase("f(3)", "7"))))]
        )
        history = {"p": book.retrieve("p")}
        assert [t.call for t in history["p"]] == ["f(helper(1))", "f(3)"]
        (replayed,) = score_batch([ScoringItem(PROBLEM, (BUGGY,), ((),))], sandbox, reward=RewardConfig(),
                                  history=history)  # fmt: skip
        assert replayed.breakdowns[0].history_total == 1  # only f(3) counts against the code
        assert replayed.mistakes.rejected == (HOSTILE,)
        report = book.apply_step(2, [replayed.mistakes])
        assert report.rejected == 1
        assert [t.call for t in book.retrieve("p")] == ["f(3)"]  # failed again by the buggy code


INTRO = "next((g := (g.gi_frame.f_back for _ in [1])))"
REAL_F = f"{INTRO}.f_back.f_back.f_back.f_locals['scope'].ns['f']"
CODE_OF_F = f"{INTRO}.f_builtins['getattr']({REAL_F}, '__code__').co_code"
READS_BYTECODE = f"```python\nassert f(len({CODE_OF_F}) + sum({CODE_OF_F})) == len({CODE_OF_F}) + sum({CODE_OF_F}) + 1\n```"
HONEST = "```python\nassert f(0) == 1\nassert f(-3) == -2\nassert f(10) == 11\n```"


@pytest.mark.parametrize("static_check", [True, False])
def test_the_mutation_term_pays_nothing_for_a_test_that_reads_the_bytecode(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, static_check: bool
) -> None:
    """Every mutant has other bytecode, so the reading test "killed" each live one and earned the
    whole term; now it is invalid on the reference and earns nothing, while the honest suite beside
    it still kills some mutants. Without the host's parse, the run on the reference's variant
    still finds it (its outcome differs there)."""
    if not static_check:
        monkeypatch.setattr("codea1.sandbox.grid.refusal", lambda call, entry_point: "")
    p = Problem(id="m", question="def f(x: int) -> int:\n    \"\"\"x + 1.\"\"\"\n", entry_point="f",
                reference="def f(x):\n    return x + 1\n", golden_tests=("assert f(1) == 2", "assert f(3) == 4"))  # fmt: skip
    item = ScoringItem(
        p, ("```python\ndef f(x):\n    return 1 + x\n```",) * 2, ((READS_BYTECODE,), (HONEST,))
    )
    (score,) = score_batch([item], sandbox, reward=RewardConfig(mutation_weight=1.0))
    assert score.term_stats["mutation"]["live"] > 0
    intro, honest = (score.breakdowns[c].suites[0].terms["mutation"] for c in (0, 1))
    assert intro["killed"] == 0.0 and intro["value"] == 0.0
    assert honest["killed"] > 0 and honest["value"] > 0
    assert score.grid.oracle[0].status == "invalid"
    if not static_check:
        assert score.grid.oracle[0].reason == VARIANT_DIFFERS
