"""The mutation term through ``score_batch`` (deviation D12): which training mutants live, which are
equivalent or dropped, which kills count, what R_T gains; and the draw itself on the real mutator."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from scoring_fake_grid import FakeSandbox

from codea1.cli import main
from codea1.config import RewardConfig
from codea1.eval.cosmic_mutants import cosmic_ray_mutants
from codea1.eval.mutants import generate_mutants
from codea1.scoring import ScoringItem, score_batch
from codea1.tracking import read_metrics
from codea1.training_mutants import MutantPool, draw_mutants
from codea1.types import Problem
from tests.scripted_run import SCRIPTED_RUN

REF = "def f(x):\n    return x + 1\n"
GOLDEN = ("assert f(1) == 2", "assert f(3) == 4")
DRAWN = [
    "def f(x):\n    return x + 3\n",  # A: live (fails both golden tests; no evaluation mutant's twin)
    "def f(x):\n    return abs(x) + 1\n",  # B: equivalent on the golden tests (positive inputs)
    "def f(x):\n    return x * 2\n",  # C: live (passes f(1) == 2, fails f(3) == 4)
    "def g(x):\n    return x\n",  # D: does not define f: dropped
]
DRAWN_KINDS = ("constant", "call", "arithmetic", "return")
SUITE = "```python\nassert f(1) == 2\nassert f(-1) == 0\nassert f(5) == 6\n```"


def _item() -> ScoringItem:
    p = Problem(id="p", question="q", entry_point="f", reference=REF, golden_tests=GOLDEN)
    return ScoringItem(p, ("```python\ndef f(x):\n    return x + 1\n```",), ((SUITE,),))


@pytest.fixture
def fixed_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        "codea1.training_mutants.draw_labelled_mutants",
        lambda reference, budget, seed: dict(zip(DRAWN, DRAWN_KINDS, strict=True)),
    )


def test_the_term_is_exact_on_a_hand_computed_problem(fixed_draw: None) -> None:
    """Live: A and C (M = 2); B is equivalent and D dropped, so B's kill by f(-1) == 0 earns nothing.
    Tests in order: f(1) == 2 kills {A}; f(-1) == 0 kills {A, C}, C new; f(5) == 6 kills {A, C},
    nothing new (a redundant test). Killed 2 of 2: the term is 1.0, and at weight 0.5 R_T gains 0.5."""
    sandbox = FakeSandbox()
    (off,) = score_batch([_item()], sandbox, reward=RewardConfig())
    assert len(sandbox.calls) == 1 and off.term_stats == {}  # weight 0: no mutant drawn or run
    (on,) = score_batch([_item()], FakeSandbox(), reward=RewardConfig(mutation_weight=0.5))
    assert on.term_stats["mutation"] | {"filter_seconds": 0.0} == {
        "generated": 4.0, "equivalent": 1.0, "dropped": 1.0, "twins": 0.0, "live": 2.0, "filter_seconds": 0.0,
        "verdicts": 6.0,
    }  # fmt: skip
    suite = on.breakdowns[0].suites[0]
    assert suite.terms["mutation"] == {
        "value": 1.0, "weight": 0.5, "reward": 0.5, "live": 2.0, "killed": 2.0, "redundant_kills": 3.0,
        "redundant_tests": 1.0,
    }  # fmt: skip
    assert on.suite_rewards[0][0] == pytest.approx(off.suite_rewards[0][0] + 0.5)
    assert on.code_rewards == off.code_rewards  # the mutants are not codes: R_C and its grid unchanged
    assert len(on.grid.code_status) == len(off.grid.code_status) == 1


def test_the_pool_filters_each_problem_once_per_run(fixed_draw: None) -> None:
    sandbox, pool = FakeSandbox(), MutantPool(16, 0)
    reward = RewardConfig(mutation_weight=1.0)
    first = score_batch([_item()], sandbox, reward=reward, mutants=pool)
    second = score_batch([_item()], sandbox, reward=reward, mutants=pool)
    assert len(sandbox.calls) == 3  # the filter's call, then one grid per step
    assert first[0].suite_rewards == second[0].suite_rewards
    assert second[0].term_stats["mutation"]["filter_seconds"] == 0.0


def test_a_problem_without_golden_tests_gets_no_live_mutant_and_zero_term() -> None:
    p = Problem(id="p", question="q", entry_point="f", reference=REF)
    item = ScoringItem(p, ("```python\ndef f(x):\n    return x + 1\n```",), ((SUITE,),))
    (s,) = score_batch([item], FakeSandbox(), reward=RewardConfig(mutation_weight=1.0))
    assert s.term_stats["mutation"]["live"] == 0.0
    assert s.breakdowns[0].suites[0].terms["mutation"]["value"] == 0.0


def test_training_mutants_are_never_the_mutants_eval_counts() -> None:
    """The draw holds Cosmic-Ray's mutants and the AST mutator's second-order ones, never the
    reference or one of its first-order AST mutants (the set ``eval/tester/mut@k`` samples from),
    whatever the seed; it is seeded."""
    reference = "def f(xs, k):\n    total = 0\n    for x in xs:\n        if x > k:\n            total += x\n    return total\n"
    first = {m.source for m in generate_mutants(reference)}
    second = {s.source for m in generate_mutants(reference) for s in generate_mutants(m.source)}
    cosmic = {ast.unparse(ast.parse(m.source)) + "\n" for m in cosmic_ray_mutants(reference)}
    available = (cosmic | second) - first - {reference}
    assert "x < k" in "".join(cosmic - first)  # Cosmic-Ray's > -> <, which the AST mutator never makes
    assert set(draw_mutants(reference, 1000, 0)) == available and len(available) > len(second - first)
    for seed in range(3):
        drawn = draw_mutants(reference, 8, seed)
        assert len(drawn) == 8 == len(set(drawn)) and set(drawn) <= available
        assert drawn == draw_mutants(reference, 8, seed)
    assert draw_mutants(reference, 8, 0) != draw_mutants(reference, 8, 1)
    with pytest.raises(SyntaxError):
        draw_mutants("def f(:\n", 4, 0)


def test_one_line_functions_get_mutants_from_cosmic_rays_operators() -> None:
    """``return a + b`` has one first-order AST mutant besides ``return None`` and no second-order
    one; Cosmic-Ray's operators give it the other binary operators."""
    drawn = draw_mutants("def add(a, b):\n    return a + b\n", 16, 0)
    assert "def add(a, b):\n    return a * b\n" in drawn and len(drawn) >= 8
    assert not {"def add(a, b):\n    return a - b\n", "def add(a, b):\n    return None\n"} & set(drawn)


def test_a_scripted_run_logs_the_terms_metrics_with_the_real_sandbox(tmp_path: Path) -> None:
    run = tmp_path / "run"
    argv = [
        "train",
        *SCRIPTED_RUN,
        "--steps",
        "1",
        "--run-dir",
        str(run),
        "--set",
        "reward.mutation_weight=0.5",
    ]
    assert main(argv) == 0
    (m,) = read_metrics(run)
    assert m["tester/mutants_live_mean"] > 0 and m["exec/mutant_verdicts"] > 0
    assert 0.0 <= m["tester/mutants_killed_rate"] <= 1.0 and "tester/mutation_reward_mean" in m


def test_the_weight_is_checked_with_the_method(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for bad, message in [
        ("reward.mutation_weight=-1", "finite number >= 0"),
        ("reward.mutation_mutants=0", ">= 1"),
    ]:
        argv = ["train", *SCRIPTED_RUN, "--steps", "1", "--run-dir", str(tmp_path / "r"), "--set", bad]
        assert main(argv) == 2 and message in capsys.readouterr().err
    argv = ["train", *SCRIPTED_RUN, "--method", "golden", "--steps", "1", "--run-dir", str(tmp_path / "g")]
    assert main([*argv, "--set", "reward.mutation_weight=0.5"]) == 2
    assert "has no Test LLM" in capsys.readouterr().err and not (tmp_path / "g").exists()


def test_score_takes_a_term_by_name_and_refuses_a_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``codea1 score --term mutation=W`` (real sandbox, the line's golden_tests filter the mutants):
    R_T gains W x the term; a term that is unknown or has a bad weight is one line, exit 2, no output."""
    line = {"id": "p", "reference": REF, "entry_point": "f", "golden_tests": list(GOLDEN),
            "codes": ["```python\ndef f(x):\n    return x + 1\n```"], "suites": [[SUITE]]}  # fmt: skip
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(line) + "\n")
    rows = {}
    for name, extra in [("off", []), ("on", ["--term", "mutation=0.5"])]:
        out = tmp_path / f"{name}.jsonl"
        assert main(["score", "--input", str(src), "--output", str(out), "--workers", "1", *extra]) == 0
        rows[name] = json.loads(out.read_text())
    term = rows["on"]["breakdown"]["codes"][0]["suites"][0]["terms"]["mutation"]
    assert term["live"] > 0 and term["killed"] > 0 and term["reward"] == pytest.approx(0.5 * term["value"])
    gained = rows["on"]["suite_rewards"][0][0] - rows["off"]["suite_rewards"][0][0]
    assert gained == pytest.approx(term["reward"])
    assert "terms" not in rows["off"]["breakdown"]["codes"][0]["suites"][0]
    capsys.readouterr()
    for bad, message in [
        ("nosuch=1", "unknown reward term"),
        ("mutation=-2", ">= 0"),
        ("mutation", "NAME=WEIGHT"),
    ]:
        out = tmp_path / "bad.jsonl"
        assert main(["score", "--input", str(src), "--output", str(out), "--term", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1 and not out.exists()


def test_golden_asserts_of_the_form_is_true_filter_mutants_too() -> None:
    """``assert f(x) is True`` is not a test the parser takes; as an equality (type-aware, so 1 is not
    True) it filters the mutants like any golden test (before: "no golden tests", no live mutant)."""
    reference = "def is_zero(x):\n    return x == 0\n"
    p = Problem(id="z", question="q", entry_point="is_zero", reference=reference,
                golden_tests=("assert is_zero(0) is True", "assert is_zero(3) is False"))  # fmt: skip
    item = ScoringItem(p, ("```python\ndef is_zero(x):\n    return x == 0\n```",), ((SUITE,),))
    (s,) = score_batch([item], FakeSandbox(), reward=RewardConfig(mutation_weight=1.0))
    stats = s.term_stats["mutation"]
    assert stats["live"] > 0
    assert stats["generated"] == stats["live"] + stats["equivalent"] + stats["dropped"] + stats["twins"]
