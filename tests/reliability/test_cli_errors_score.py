"""``codea1 score`` on bad options, bad paths and bad bytes: a bad row costs only itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codea1.limits import max_workers

from .reliability_cli import (
    FIXTURES,
    Place,
    assert_one_line_error,
    assert_untouched,
    place_fixture,  # noqa: F401 - the `place` fixture
    run_cli,
    run_process,
    tree,
)

WORKED = (FIXTURES / "score" / "worked_example.jsonl").read_bytes().splitlines()[0]


def _input(place: Place, lines: list[bytes]) -> Path:
    path = place.data / "in.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        (["--workers", "-1"], f"--workers must be in [0, {max_workers()}]"),
        (["--alpha", "nan"], "--alpha must be in [0, 1]"),
        (["--no-update"], "--no-update needs --mistake-book"),
    ],
)
def test_bad_option_is_one_line_and_creates_nothing(
    place: Place, capsys: pytest.CaptureFixture[str], option: list[str], needle: str
) -> None:
    src = _input(place, [WORKED])
    before = tree(place.data)
    outcome = run_cli(["score", "--input", src, "--output", place.out / "r.jsonl", *option], capsys)
    assert_one_line_error(outcome, needle)
    assert_untouched(place, before)


def test_output_directory_strands_nothing(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    src = _input(place, [WORKED])
    before = tree(place.data)
    outcome = run_cli(["score", "--input", src, "--output", place.out, "--workers", "1"], capsys)
    assert_one_line_error(outcome, "is a directory")
    assert_untouched(place, before)  # no out.tmp beside it, no results anywhere


def test_input_directory_says_directory(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    outcome = run_cli(["score", "--input", place.data, "--output", place.out / "r.jsonl"], capsys)
    assert_one_line_error(outcome, "is a directory")
    assert_untouched(place, {})


def test_non_utf8_row_costs_only_that_row(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    lone = json.loads(WORKED)
    lone["id"] = "lone\ud800"
    src = _input(
        place,
        [WORKED, b'{"id": "latin1", "codes": ["caf\xe9"]}', json.dumps(lone).encode(), WORKED],
    )
    before = tree(place.data)
    out = place.out / "r.jsonl"
    outcome = run_cli(["score", "--input", src, "--output", out, "--workers", "1"], capsys)
    assert outcome.code == 0 and "Traceback" not in outcome.err, outcome.err[-2000:]
    assert "scored 2 of 4 line(s), 2 line(s) with errors" in outcome.err
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r.get("id") for r in rows] == ["worked/absolute_sum", "latin1", None, "worked/absolute_sum"]
    assert "bad input line 2: not UTF-8" in rows[1]["error"]
    assert "lone surrogate" in rows[2]["error"]
    assert rows[0] == rows[3] and "error" not in rows[0]
    assert tree(place.data) == before
    assert list(tree(place.out)) == ["r.jsonl"] and tree(place.cwd) == {} and tree(place.tmp) == {}


def test_a_subprocess_run_refuses_an_output_directory(place: Place) -> None:
    src = _input(place, [WORKED])
    before = tree(place.data)
    outcome = run_process(["score", "--input", src, "--output", place.out], place.cwd, tmpdir=place.tmp)
    assert_one_line_error(outcome, "is a directory")
    assert_untouched(place, before)


def test_stdin_with_bad_bytes_costs_only_that_row(place: Place) -> None:
    stdin = WORKED + b"\n" + b'{"id": "bin\xff"}\n' + WORKED + b"\n"
    outcome = run_process(
        ["score", "--input", "-", "--output", "-", "--workers", "1"], place.cwd, tmpdir=place.tmp, stdin=stdin
    )
    assert outcome.code == 0 and "Traceback" not in outcome.err, outcome.err[-2000:]
    rows = [json.loads(line) for line in outcome.out.splitlines()]
    assert len(rows) == 3 and "not UTF-8" in rows[1]["error"] and "error" not in rows[2]
    assert tree(place.cwd) == {} and tree(place.tmp) == {}
