"""``codea1 eval code|tests|bon|compare`` on bad rows, bad options and problem files without a harness.

Each refusal is one ``codea1: error:`` line with exit 2, no traceback, and creates nothing: no
results directory (the default one lives in the working directory), no timings cache, no output.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from codea1.limits import max_workers

from .reliability_cli import (
    FIXTURES,
    Outcome,
    Place,
    assert_one_line_error,
    assert_untouched,
    cli_env,
    place_fixture,  # noqa: F401 - the `place` fixture
    run_cli,
    run_process,
    tree,
)

PROBLEMS = FIXTURES / "eval" / "problems.jsonl"
CLAMP = "```python\ndef clamp(x, lo, hi):\n    return min(max(x, lo), hi)\n```"
TESTS = ["assert clamp(5, 0, 10) == 5", "assert clamp(-1, 0, 10) == 0"]


def _write(place: Place, name: str, rows: list[dict | bytes]) -> Path:
    path = place.data / name
    path.write_bytes(b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in rows))
    return path


def _argv(place: Place, verb: str, *extra: object) -> list[object]:
    # no --results-dir: the default (eval_results/ in the working directory) must not appear either
    return ["eval", verb, "--data", PROBLEMS, "--cache-dir", place.out / "cache", "--workers", "1", *extra]


BAD_SAMPLE_ROWS = [
    ([{"completion": CLAMP}], 'every line needs a string "id"'),
    ([{"id": 7, "completion": CLAMP}], 'every line needs a string "id"'),
    ([{"id": "fx/clamp", "completion": 42}], 'needs a string "completion" or "solution"'),
    ([{"id": "fx/clamp", "completion": ["x"]}], 'needs a string "completion" or "solution"'),
    ([b'{"id": "fx/clamp", "completion": "caf\xe9"}'], "samples.jsonl:1: not UTF-8 (byte 0xe9"),
    ([b'{"id": "fx/clamp", "completion": "\\udc80"}'], "lone surrogate"),
    ([b'{"id": "fx/clamp", "compl'], "samples.jsonl:1: not valid JSON"),
]


@pytest.mark.parametrize(("rows", "needle"), BAD_SAMPLE_ROWS)
def test_code_samples_bad_row(
    place: Place, capsys: pytest.CaptureFixture[str], rows: list, needle: str
) -> None:
    samples = _write(place, "samples.jsonl", rows)
    before = tree(place.data)
    outcome = run_cli(_argv(place, "code", "--samples", samples, "--output", place.out / "m.json"), capsys)
    assert_one_line_error(outcome, needle)
    assert_untouched(place, before)


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        ([{"completion": "assert clamp(1, 0, 2) == 1"}], 'every line needs a string "id"'),
        ([{"id": "fx/clamp", "completion": None}], 'needs "completion" or a list of "tests"'),
        ([{"id": "fx/clamp", "tests": [1, 2]}], 'needs "completion" or a list of "tests"'),
        ([b"\xff\xfe{}"], "tests.jsonl:1: not UTF-8"),
    ],
)
def test_test_suites_bad_row(
    place: Place, capsys: pytest.CaptureFixture[str], rows: list, needle: str
) -> None:
    suites = _write(place, "tests.jsonl", rows)
    before = tree(place.data)
    outcome = run_cli(_argv(place, "tests", "--tests", suites), capsys)
    assert_one_line_error(outcome, needle)
    assert_untouched(place, before)


def test_bon_bad_rows(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    samples = _write(place, "samples.jsonl", [{"id": "fx/clamp", "solution": 3}])
    suites = _write(place, "tests.jsonl", [{"id": "fx/clamp", "tests": TESTS}])
    before = tree(place.data)
    outcome = run_cli(_argv(place, "bon", "--samples", samples, "--tests", suites), capsys)
    assert_one_line_error(outcome, 'needs a string "completion" or "solution"')
    suites.write_text(json.dumps({"tests": TESTS}) + "\n")
    samples.write_text(json.dumps({"id": "fx/clamp", "completion": CLAMP}) + "\n")
    before = tree(place.data)
    outcome = run_cli(_argv(place, "bon", "--samples", samples, "--tests", suites), capsys)
    assert_one_line_error(outcome, 'every line needs a string "id"', alone=False)  # after a warning
    assert_untouched(place, before)


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        (["--workers", "-1"], f"--workers must be in [0, {max_workers()}]"),
        (["--memory-mb", "0"], "--memory-mb must be in [64,"),
        (["--budget-floor", "nan"], "--budget-floor must be a number of seconds"),
        (["--budget-factor", "0"], "--budget-factor must be a finite number > 0"),
        (["--limit", "-3"], "--limit must be a finite number >= 0"),
        (["--n", "0"], "--n must be a finite number >= 1"),
        (["--top-p", "2"], "--top-p must be in (0, 1]"),
    ],
)
def test_code_bad_option_creates_nothing(
    place: Place, capsys: pytest.CaptureFixture[str], option: list[str], needle: str
) -> None:
    samples = _write(place, "samples.jsonl", [{"id": "fx/clamp", "completion": CLAMP}])
    before = tree(place.data)
    outcome = run_cli(_argv(place, "code", "--samples", samples, *option), capsys)
    assert_one_line_error(outcome, needle)
    assert_untouched(place, before)


@pytest.mark.parametrize("where", ["output", "samples", "results-dir"])
def test_code_bad_paths(place: Place, capsys: pytest.CaptureFixture[str], where: str) -> None:
    samples = _write(place, "samples.jsonl", [{"id": "fx/clamp", "completion": CLAMP}])
    extra: list[object] = {
        "output": ["--samples", samples, "--output", place.out],
        "samples": ["--samples", place.data],
        "results-dir": ["--samples", samples, "--results-dir", samples],
    }[where]
    before = tree(place.data)
    outcome = run_cli(_argv(place, "code", *extra), capsys)
    assert_one_line_error(outcome, "is a directory" if where != "results-dir" else "is not a directory")
    assert_untouched(place, before)


def test_compare_of_two_empty_files(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    before_file, after_file = place.data / "a.jsonl", place.data / "b.jsonl"
    before_file.write_text("")
    after_file.write_text("\n")
    snapshot = tree(place.data)
    outcome = run_cli(["eval", "compare", before_file, after_file, "--output", place.out / "c.json"], capsys)
    assert_one_line_error(outcome, "a.jsonl: no per-problem records")
    assert outcome.out == ""  # no empty table
    assert_untouched(place, snapshot)


def test_golden_tests_in_a_tests_column(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown column → a warning naming the nearest known one; the later error names the columns."""
    rows = [json.loads(line) for line in PROBLEMS.read_text().splitlines()]
    for row in rows:
        row["tests"] = [f"assert {row['entry_point']} is not None"]
        del row["harness"], row["golden_tests"]
    problems = _write(place, "problems.jsonl", rows)
    suites = _write(place, "suites.jsonl", [{"id": "fx/clamp", "tests": TESTS}])
    samples = _write(place, "samples.jsonl", [{"id": "fx/clamp", "completion": CLAMP}])
    before = tree(place.data)
    argv = ["eval", "tests", "--data", problems, "--tests", suites, "--code-samples", samples]
    outcome = run_cli([*argv, "--cache-dir", place.out / "cache", "--workers", "1"], capsys)
    line = assert_one_line_error(outcome, "no harness to check candidates against", alone=False)
    assert "'harness' column" in line and "'golden_tests' column" in line
    warnings = [w for w in outcome.err.splitlines() if w.startswith("codea1: warning:")]
    assert warnings == [
        f"codea1: warning: {problems}: unknown column 'tests' (did you mean 'golden_tests'?) is ignored"
    ]
    assert_untouched(place, before)

    validate = run_cli(["data", "validate", problems], capsys)
    assert validate.code == 0 and "did you mean 'golden_tests'?" in validate.out


def test_a_subprocess_run_of_a_bad_row(place: Place) -> None:
    samples = _write(place, "samples.jsonl", [{"id": "fx/clamp", "completion": 42}])
    before = tree(place.data)
    outcome = run_process(_argv(place, "code", "--samples", samples), place.cwd, tmpdir=place.tmp)
    assert_one_line_error(outcome, 'needs a string "completion" or "solution"')
    assert_untouched(place, before)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "self.json, which is not a results JSONL"),  # a metrics JSON naming itself
        (b"\xff{}", "self.json: not UTF-8 (byte 0xff at offset 0)"),
        (b"[" * 100_000, "self.json: not usable JSON (nested too deeply)"),
        (b'{"results": "absent.jsonl"}', "absent.jsonl: no such file"),
    ],
)
def test_compare_of_broken_metrics_files(
    place: Place, capsys: pytest.CaptureFixture[str], content: bytes | None, needle: str
) -> None:
    metrics = place.data / "self.json"
    metrics.write_bytes(content if content is not None else json.dumps({"results": str(metrics)}).encode())
    twin = place.data / "twin.json"  # a second file: the same file twice is refused before it is read
    twin.write_bytes(metrics.read_bytes())
    snapshot = tree(place.data)
    outcome = run_cli(["eval", "compare", metrics, twin], capsys)
    assert_one_line_error(outcome, needle)
    assert_untouched(place, snapshot)


def test_a_memory_limit_above_the_hard_limit_is_one_line_not_a_score(place: Place) -> None:
    """Issue 35, item 5: under ``ulimit -Hv`` below ``--memory-mb`` every sample, the references
    included, was ``sandbox setup failed`` and ``eval code`` exited 0 with pass@1 0.00."""
    samples = _write(place, "samples.jsonl", [{"id": "fx/clamp", "completion": CLAMP}])
    before = tree(place.data)
    argv = [str(a) for a in _argv(place, "code", "--samples", samples, "--output", place.out / "m.json",
                                  "--results-dir", place.out / "res", "--memory-mb", "8192")]  # fmt: skip

    def hard_limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (6144 << 20, 6144 << 20))

    done = subprocess.run([sys.executable, "-m", "codea1", *argv], cwd=place.cwd, env=cli_env(place.tmp),
                          capture_output=True, text=True, timeout=120, preexec_fn=hard_limit)  # fmt: skip
    outcome = Outcome(done.returncode, done.stdout, done.stderr)
    assert_one_line_error(outcome, "memory_mb=8192", "hard address-space limit of 6144 MiB")
    assert_untouched(place, before)
