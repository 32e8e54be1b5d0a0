"""Tests that attack the candidate instead of testing it, through ``codea1 score`` and the real
sandbox: a correct candidate keeps its full reward and the attacking suite earns no failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codea1.cli import main

pytest.importorskip("codea1.sandbox.local", reason="sandbox module not importable yet")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "score" / "test_side_attacks.jsonl"


def test_a_correct_candidate_is_not_failed_by_tests_that_inspect_or_patch(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    assert main(["score", "--input", str(FIXTURE), "--output", str(out), "--workers", "2"]) == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["code_rewards"] == [1.0]
    attack, honest = row["breakdown"]["codes"][0]["suites"]
    assert (attack["passed"], attack["n_valid"], attack["failures_counted"]) == (1, 1, 0)
    assert attack["invalid_by_reason"] == {"oracle_invalid": 2}
    assert row["suite_rewards"] == [[0.0625, 0.1875]]  # the attack earns less than the honest suite
    reasons = [t.get("oracle_reason", "") for t in row["breakdown"]["tests"]]
    assert reasons[1:3] == ["test uses total other than by calling it", "test uses introspection (setattr)"]
