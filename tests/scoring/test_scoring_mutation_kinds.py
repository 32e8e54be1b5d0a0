"""The mutation-kinds term through ``score_batch`` (deviation D13): each live training mutant keeps the
fault kind it was drawn with, the term pays kinds (not mutants) killed, and the real draw labels its
mutants by the operator that made them."""

from __future__ import annotations

from pathlib import Path

import pytest
from scoring_fake_grid import FakeSandbox
from test_scoring_mutation import DRAWN, GOLDEN, REF

from codea1.cli import main
from codea1.config import RewardConfig
from codea1.scoring import ScoringItem, score_batch
from codea1.tracking import read_metrics
from codea1.training_mutants import cosmic_kind, draw_labelled_mutants, draw_mutants
from codea1.types import Problem
from tests.scripted_run import SCRIPTED_RUN

ONE_KILL = "```python\nassert f(1) == 2\n```"  # kills A (x + 3) only; C (x * 2) passes f(1) == 2


def _score(monkeypatch: pytest.MonkeyPatch, kinds: tuple[str, ...], reward: RewardConfig):
    monkeypatch.setattr(
        "codea1.training_mutants.draw_labelled_mutants",
        lambda reference, budget, seed: dict(zip(DRAWN, kinds, strict=True)),
    )
    p = Problem(id="p", question="q", entry_point="f", reference=REF, golden_tests=GOLDEN)
    item = ScoringItem(p, ("```python\ndef f(x):\n    return x + 1\n```",), ((ONE_KILL,),))
    (score,) = score_batch([item], FakeSandbox(), reward=reward)
    return score


def test_the_term_pays_kinds_killed_not_mutants_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Live: A and C (B equivalent, D dropped). The suite kills A alone: Mut = 1/2 whatever the kinds;
    Kinds = 1/1 when A and C are of one kind, 1/2 when their kinds differ."""
    reward = RewardConfig(mutation_weight=0.5, mutation_kinds_weight=1.0)
    one_kind = _score(monkeypatch, ("arithmetic", "call", "arithmetic", "return"), reward)
    two_kinds = _score(monkeypatch, ("constant", "call", "arithmetic", "return"), reward)
    for score, value, live_kinds in ((one_kind, 1.0, 1.0), (two_kinds, 0.5, 2.0)):
        terms = score.breakdowns[0].suites[0].terms
        assert terms["mutation"]["value"] == 0.5 and terms["mutation"]["killed"] == 1.0
        assert (
            terms["mutation_kinds"]["value"] == value and terms["mutation_kinds"]["live_kinds"] == live_kinds
        )
        assert score.term_stats["mutation_kinds"]["kinds"] == live_kinds
        assert "kinds" not in score.term_stats["mutation"]  # the mutation term's counts are as they were
    assert one_kind.suite_rewards[0][0] == pytest.approx(two_kinds.suite_rewards[0][0] + 0.5)


def test_the_kinds_term_alone_draws_and_runs_the_mutants(monkeypatch: pytest.MonkeyPatch) -> None:
    reward = RewardConfig(mutation_kinds_weight=0.5)
    score = _score(monkeypatch, ("constant", "call", "arithmetic", "return"), reward)
    assert set(score.term_stats) == {"mutation_kinds"} and score.term_stats["mutation_kinds"]["live"] == 2.0
    assert set(score.breakdowns[0].suites[0].terms) == {"mutation_kinds"}
    off = _score(monkeypatch, ("constant", "call", "arithmetic", "return"), RewardConfig())
    assert off.term_stats == {} and score.suite_rewards[0][0] == pytest.approx(off.suite_rewards[0][0] + 0.25)


def test_the_draw_labels_each_mutant_by_its_operator() -> None:
    """Cosmic-Ray's ``a + b`` -> ``a * b`` is arithmetic; a second-order AST mutant carries the
    kinds of its two edits; the labelled draw is the plain draw with labels."""
    add = "def add(a, b):\n    return a + b\n"
    labelled = draw_labelled_mutants(add, 16, 0)
    assert list(labelled) == draw_mutants(add, 16, 0)
    assert labelled["def add(a, b):\n    return a * b\n"] == "arithmetic"
    loop = "def f(xs, k):\n    total = 0\n    for x in xs:\n        if x > k:\n            total += x\n    return total\n"
    kinds = set(draw_labelled_mutants(loop, 1000, 0).values())
    assert {"comparison", "constant", "boolean", "loop"} <= kinds  # Cosmic-Ray's > -> <, 0 -> 1, ...
    assert any("+" in k for k in kinds)  # second-order: two edits of different kinds
    assert all(k.replace("+", "").isalpha() for k in kinds)
    assert cosmic_kind("core/ReplaceUnaryOperator_USub_Not") == "boolean"
    assert cosmic_kind("core/ReplaceUnaryOperator_USub_UAdd") == "arithmetic"
    assert cosmic_kind("core/ReplaceComparisonOperator_Gt_Lt") == "comparison"
    assert cosmic_kind("core/NumberReplacer") == "constant"
    assert cosmic_kind("core/SomeFutureOperator") == "SomeFutureOperator"


def test_a_scripted_run_logs_the_kinds_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    argv = ["train", *SCRIPTED_RUN, "--steps", "1", "--run-dir", str(run)]
    assert main([*argv, "--set", "reward.mutation_kinds_weight=0.5"]) == 0
    (m,) = read_metrics(run)
    assert m["tester/mutant_kinds_live_mean"] > 0 and m["exec/mutant_verdicts"] > 0
    assert 0.0 <= m["tester/mutant_kinds_killed_rate"] <= 1.0 and "tester/mutation_kinds_reward_mean" in m
    assert "tester/mutation_reward_mean" not in m  # the mutation term itself stays off
    capsys.readouterr()
    golden = ["train", *SCRIPTED_RUN, "--steps", "1", "--method", "golden", "--run-dir", str(tmp_path / "g")]
    assert main([*golden, "--set", "reward.mutation_kinds_weight=0.5"]) == 2
    assert "reward.mutation_kinds_weight=0.5 rewards tests" in capsys.readouterr().err
    assert main([*argv, "--set", "reward.mutation_kinds_weight=-1"]) == 2
    assert "finite number >= 0" in capsys.readouterr().err
