"""``codea1 mistakes inspect|export``."""

from __future__ import annotations

import json

from codea1.cli import main
from codea1.replay.mistake_book import DEFAULT_FILENAME, MistakeBook, MistakeHit, MistakeUpdate
from codea1.types import TestCase


def make_run(tmp_path):
    run = tmp_path / "run"
    with MistakeBook(run / DEFAULT_FILENAME) as book:
        book.apply_step(
            5,
            [
                MistakeUpdate("HumanEval/0", failed=(MistakeHit(TestCase("f([1, 2])", "3"), 4),)),
                MistakeUpdate(
                    "MBPP/2",
                    failed=(MistakeHit(TestCase("g(0)", "0"), 1), MistakeHit(TestCase("g(1)", "2"), 1)),
                ),
            ],
        )
    return run


def test_inspect_run_dir(tmp_path, capsys):
    run = make_run(tmp_path)
    assert main(["mistakes", "inspect", str(run)]) == 0
    out = capsys.readouterr().out
    assert "last step: 5" in out and "entries: 3 across 2 problem(s)" in out
    assert out.index("HumanEval/0") < out.index("MBPP/2")  # heaviest problem first
    assert "freq=4 added@5" in out and "assert f([1, 2]) == 3" in out


def test_export_and_errors(tmp_path, capsys):
    run = make_run(tmp_path)
    out = tmp_path / "mb.jsonl"
    assert main(["mistakes", "export", str(run / DEFAULT_FILENAME), "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and rows[0]["problem_id"] == "HumanEval/0" and rows[0]["frequency"] == 4
    assert main(["mistakes", "inspect", str(tmp_path / "nowhere")]) == 2
    assert "no Mistake Book" in capsys.readouterr().err
