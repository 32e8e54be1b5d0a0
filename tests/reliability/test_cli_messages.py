"""Messages that name the right thing (issue 26, part 9): a ``--set`` error names the override (the key
and the value), not the shipped preset's path; ``score`` names lines by their number in the input
file and counts lines, not problems; ``sandbox run`` ends with a count and exits 1 when every line
is an error row."""

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

WORKED = (FIXTURES / "score" / "worked_example.jsonl").read_bytes().splitlines()[0]
JOB = {"id": "neg", "reference": "def f(x):\n    return -x\n", "entry_point": "f",
       "codes": ["def f(x):\n    return -x\n"], "tests": [{"call": "f(2)", "predicted": "-2"}]}  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "needles"),
    [
        (
            ["--set", "coder.sampling.n=abc"],
            ["--set coder.sampling.n=abc:", "must be an integer, got str 'abc'"],
        ),
        (["--set", "coder.sampling.nn=3"], ["--set coder.sampling.nn=3:", "unknown key 'coder.sampling.nn'"]),
        (["--set", "coder=3"], ["--set coder=3:", "coder must be a mapping, got 3"]),
        (["--set", "reward.alpha=[1"], ["--set reward.alpha=[1:", "not valid YAML"]),
        (
            ["--set", "coder.sampling.n=1"],
            ["coder.sampling.n=1: GRPO needs", "(from --set coder.sampling.n=1)"],
        ),
        (["--steps", "0"], ["train.steps", "must be >= 1", "(from --steps 0)"]),
        (["--alpha", "2"], ["reward.alpha must be in [0, 1], got 2.0", "(from --alpha 2)"]),
    ],
)
def test_an_override_error_names_the_override_not_the_preset(
    place: Place, capsys: pytest.CaptureFixture[str], flags: list[str], needles: list[str]
) -> None:
    outcome = run_cli(["train", *FAST, "--run-dir", place.out / "run", *flags], capsys)
    line = assert_one_line_error(outcome, *needles)
    assert "presets" not in line and "tiny-cpu.yaml" not in line, line
    assert_untouched(place, {})


def test_a_broken_preset_file_is_still_named(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    preset = place.data / "mine.yaml"
    preset.write_text("coder:\n  sampling:\n    n: 1\n")
    before = tree(place.data)
    outcome = run_cli(["train", "--preset", preset, "--run-dir", place.out / "run", "--steps", "2"], capsys)
    assert_one_line_error(outcome, str(preset), "coder.sampling.n=1: GRPO needs")
    assert_untouched(place, before)


def test_score_names_the_file_line_past_the_first_chunk(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [WORKED, b""] + [b'{"id": "x%d"}' % i for i in range(298)]  # line 2 blank: lines are file lines
    src = place.data / "in.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    out = place.out / "r.jsonl"
    outcome = run_cli(["score", "--input", src, "--output", out, "--workers", "1"], capsys)
    assert outcome.code == 0 and "Traceback" not in outcome.err, outcome.err[-2000:]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 299 and "error" not in rows[0]
    assert rows[1]["error"].startswith("bad input line 3:") and rows[1]["id"] == "x0"
    assert rows[280]["error"].startswith("bad input line 282:") and rows[280]["id"] == "x279"
    assert rows[-1]["error"].startswith("bad input line 300:")
    assert outcome.err.strip().splitlines()[-1] == (
        "scored 1 of 299 line(s), 298 line(s) with errors (their rows hold the reason in 'error')"
    )


def test_score_counts_lines_not_problems(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    src = place.data / "in.jsonl"
    src.write_bytes(b"\n".join([WORKED] * 4 + [b"not json"] * 6) + b"\n")
    outcome = run_cli(["score", "--input", src, "--output", place.out / "r.jsonl", "--workers", "1"], capsys)
    assert outcome.code == 0, outcome.err[-2000:]
    assert outcome.err.strip().splitlines()[-1].startswith("scored 4 of 10 line(s), 6 line(s) with errors")


def _sandbox_run(
    place: Place, capsys: pytest.CaptureFixture[str], lines: list[bytes]
) -> tuple[int, str, Path]:
    src = place.data / "jobs.jsonl"
    src.write_bytes(b"".join(line + b"\n" for line in lines))
    out = place.out / "r.jsonl"
    outcome = run_cli(["sandbox", "run", "--input", src, "--output", out, "--workers", "1"], capsys)
    assert "Traceback" not in outcome.err, outcome.err[-2000:]
    return outcome.code, outcome.err, out


def test_sandbox_run_with_only_error_rows_says_so_and_exits_1(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err, out = _sandbox_run(place, capsys, [b'{"id": "a"}', b"not json", b'{"id": "c", "codes": 3}'])
    assert code == 1
    assert err.splitlines() == [
        f"codea1 sandbox run: every one of the 3 line(s) is an error row (the reason is in its 'error' "
        f"field in {out}): nothing ran"
    ]
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["a", "line-2", "c"]


def test_sandbox_run_ends_with_a_count(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    code, err, out = _sandbox_run(place, capsys, [json.dumps(JOB).encode(), b"not json"])
    assert code == 0
    assert err.splitlines() == [
        "codea1 sandbox run: ran 1 of 2 line(s), 1 line(s) with errors (the reason is in their 'error' field)"
    ]
    code, err, out = _sandbox_run(place, capsys, [json.dumps(JOB).encode()])
    assert code == 0 and err.splitlines() == ["codea1 sandbox run: ran 1 of 1 line(s)"]
