"""A problem whose text holds a lone surrogate (``"\\ud800"`` in JSON, which is no text at all) is
refused when the data is read (issue 26, part 3): ``train`` ends in one line naming the row and the
field, before the run directory exists; ``data validate`` lists the row; ``eval`` refuses the file;
``score`` answers that line with an error row. No traceback, the input byte-identical."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .reliability_cli import (
    FIXTURES,
    Place,
    assert_one_line_error,
    assert_untouched,
    place_fixture,  # noqa: F401 - the `place` fixture
    run_cli,
    tree,
)
from .run_dirs import FAST

ROWS = [json.loads(line) for line in (FIXTURES / "eval" / "problems.jsonl").read_text().splitlines()]


def _with_surrogate(place: Place, field: str) -> Path:
    """The eval fixture's problems, the second one's ``field`` holding a lone surrogate."""
    lines = [json.dumps(r) for r in ROWS]
    bad = dict(ROWS[1])
    bad[field] = bad[field][:5] + "\ud800" + bad[field][5:]
    lines[1] = json.dumps(bad)  # ensure_ascii: the surrogate is written as the escape \ud800
    assert "\\ud800" in lines[1]
    path = place.data / "problems.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("field", ["question", "id", "reference"])
def test_train_refuses_the_row_before_the_run_dir(
    place: Place, capsys: pytest.CaptureFixture[str], field: str
) -> None:
    data = _with_surrogate(place, field)
    before = tree(place.data)
    run = place.out / "run"
    argv = ["train", *FAST, "--steps", "1", "--run-dir", run, "--set", f"data.train={data}",
            "--set", "data.problems_per_step=1"]  # fmt: skip
    outcome = run_cli(argv, capsys)
    assert_one_line_error(outcome, "row 2", f"field '{field}'", "lone surrogate", "\\ud800")
    assert not run.exists()
    assert_untouched(place, before)


def test_data_validate_lists_the_row(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    data = _with_surrogate(place, "question")
    before = tree(place.data)
    outcome = run_cli(["data", "validate", data], capsys)
    assert outcome.code == 1 and "Traceback" not in outcome.err, outcome.err[-2000:]
    invalid = [line for line in outcome.out.splitlines() if line.startswith("invalid:")]
    assert len(invalid) == 1 and "row 2" in invalid[0] and "field 'question'" in invalid[0], invalid
    assert outcome.out.splitlines()[-1].endswith(", 1 invalid")
    assert_untouched(place, before)


def test_eval_refuses_the_problem_file(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    data = _with_surrogate(place, "question")
    samples = place.data / "samples.jsonl"
    samples.write_text(json.dumps({"id": ROWS[0]["id"], "completion": "x"}) + "\n")
    before = tree(place.data)
    argv = ["eval", "code", "--data", data, "--samples", samples, "--results-dir", place.out / "res",
            "--cache-dir", place.out / "cache"]  # fmt: skip
    outcome = run_cli(argv, capsys)
    assert_one_line_error(outcome, "row 2", "field 'question'", "lone surrogate", alone=False)
    assert_untouched(place, before)


def test_score_answers_the_line_with_an_error_row(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    worked = json.loads((FIXTURES / "score" / "worked_example.jsonl").read_text().splitlines()[0])
    lone = {**worked, "question": "bad \ud800 text"}
    src = place.data / "in.jsonl"
    src.write_text(json.dumps(worked) + "\n" + json.dumps(lone) + "\n")
    before = tree(place.data)
    out = place.out / "r.jsonl"
    outcome = run_cli(["score", "--input", src, "--output", out, "--workers", "1"], capsys)
    assert outcome.code == 0 and "Traceback" not in outcome.err, outcome.err[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert "error" not in rows[0] and "lone surrogate" in rows[1]["error"]
    assert tree(place.data) == before and tree(place.cwd) == {} and tree(place.tmp) == {}
