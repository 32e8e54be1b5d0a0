"""``codea1 score`` input handling (bad lines, stdin/stdout, Mistake-Book steps) with an in-process grid."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from scoring_fake_grid import FakeSandbox

from codea1.cli import main
from codea1.cli.score import parse_line, score_lines
from codea1.config import RewardConfig
from codea1.replay.mistake_book import MistakeBook

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "score" / "worked_example.jsonl"


def test_bad_lines_become_error_rows_in_place():
    good = FIXTURE.read_text().splitlines()[0]
    lines = [
        "not json",
        json.dumps(
            {"id": "x", "reference": "def f(): pass", "entry_point": "f", "codes": ["a"], "suites": []}
        ),
        good,
        json.dumps([1, 2]),
        json.dumps({"id": "y", "reference": "", "entry_point": "f", "codes": [], "suites": []}),
    ]
    rows, updates = score_lines(lines, FakeSandbox(), RewardConfig(), None)
    assert [r.get("id") for r in rows] == [None, "x", "worked/absolute_sum", None, "y"]
    assert "not JSON" in rows[0]["error"] and "1 codes" in rows[1]["error"]
    assert "JSON object" in rows[3]["error"] and "'reference'" in rows[4]["error"]
    assert "error" not in rows[2] and rows[2]["code_rewards"] == pytest.approx([1.0, 1 / 6])
    assert len(updates) == 1


def test_parse_line_accepts_imports():
    item = parse_line(
        json.dumps(
            {
                "id": "i",
                "reference": "r",
                "entry_point": "f",
                "imports": "import os",
                "codes": ["c"],
                "suites": [["t"]],
            }
        )
    )
    assert item.problem.imports == "import os" and item.suite_texts == (("t",),)


class FakeCM(FakeSandbox):
    def __init__(self, config=None):
        super().__init__()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def test_cli_stdin_stdout_and_book_steps(tmp_path, monkeypatch, capsys):
    local = pytest.importorskip("codea1.sandbox.local")
    monkeypatch.setattr(local, "Sandbox", FakeCM)
    db = tmp_path / "mb.sqlite"
    for expected_r1 in (1 / 6, 1 / 12):
        monkeypatch.setattr(sys, "stdin", io.StringIO(FIXTURE.read_text()))
        assert main(["score", "--input", "-", "--output", "-", "--mistake-book", str(db)]) == 0
        (row,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert row["code_rewards"][1] == pytest.approx(expected_r1)
    with MistakeBook(db) as book:
        assert book.last_step == 2 and {e.step_added for e in book.entries()} == {2}
    assert main(["score", "--input", str(tmp_path / "missing.jsonl"), "--output", "-"]) == 2
    assert main(["score", "--input", str(FIXTURE), "--output", "-", "--alpha", "2"]) == 2
