"""The worked example of docs/algorithm.md, through ``codea1 score`` and the real sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codea1.cli import main
from codea1.config import RewardConfig, SandboxConfig
from codea1.replay.mistake_book import MistakeBook
from codea1.scoring import ScoringItem, score_batch
from codea1.types import Problem

local = pytest.importorskip("codea1.sandbox.local", reason="sandbox module not importable yet")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "score" / "worked_example.jsonl"


def run_score(tmp_path: Path, name: str, db: Path) -> dict:
    out = tmp_path / name
    rc = main(
        ["score", "--input", str(FIXTURE), "--output", str(out), "--mistake-book", str(db), "--workers", "2"]
    )
    assert rc == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert "error" not in row, row.get("error")
    return row


def test_worked_example_reproduces_the_documented_numbers(tmp_path):
    db = tmp_path / "run" / "mistake_book.sqlite"
    db.parent.mkdir()  # a book's directory must exist, as any output's
    first = run_score(tmp_path, "first.jsonl", db)
    assert first["code_rewards"] == pytest.approx([1.0, 1 / 6])
    assert sum(first["suite_rewards"], []) == pytest.approx([0.25, 0.0625, 0.3125, -1 / 9])
    s01 = first["breakdown"]["codes"][0]["suites"][1]
    assert s01["invalid_by_reason"] == {"duplicate": 1, "no_entry_point": 1, "oracle_invalid": 1}
    assert first["breakdown"]["codes"][0]["suites"][0]["invalid_by_reason"] == {"wrong_prediction": 1}
    with MistakeBook(db) as book:
        assert book.last_step == 1
        assert {(e.call, e.frequency) for e in book.entries()} == {
            ("absolute_sum([-3, 1])", 1),
            ("absolute_sum([-1])", 1),
        }

    second = run_score(tmp_path, "second.jsonl", db)
    assert second["code_rewards"] == pytest.approx([1.0, 1 / 12])
    assert sum(second["suite_rewards"], []) == pytest.approx([0.5, 0.3125, 0.25, -1 / 9])
    assert second["breakdown"]["codes"][1]["history_total"] == 2
    with MistakeBook(db) as book:
        assert book.last_step == 2
        assert {(e.call, e.frequency, e.step_added) for e in book.entries()} == {
            ("absolute_sum([-3, 1])", 1, 2),
            ("absolute_sum([-1])", 1, 2),
        }


def test_real_sandbox_regressions():
    """Reference bugs R8 (float tolerance) and R1 (alignment) of docs/algorithm.md, with oracles
    computed by the real sandbox."""
    ref = "def mean3(a, b, c):\n    return (a + b + c) / 3\n"
    code = "```python\ndef mean3(a, b, c):\n    return a / 3 + b / 3 + c / 3\n```"
    suite = (
        "```python\n"
        "assert mean3(1, 2, 4) == undefined_name\n"  # prediction raises: wrong_prediction, own oracle
        "assert mean3(0.1, 0.2, 0.3) == 0.2\n"  # differs from the reference in the last bits
        "assert mean3(1, 1, 1) == 1.0\n"
        "assert mean3(2, 2, 5) == 3.0\n"
        "```"
    )
    p = Problem(id="floaty", question="q", entry_point="mean3", reference=ref)
    with local.Sandbox(SandboxConfig(workers=2)) as sandbox:
        (s,) = score_batch([ScoringItem(p, (code,), ((suite,),))], sandbox, reward=RewardConfig())
    assert s.error == ""
    assert s.code_rewards == (1.0,)
    assert s.breakdowns[0].suites[0].invalid_by_reason == {"wrong_prediction": 1}
    assert s.mistakes.failed == ()
