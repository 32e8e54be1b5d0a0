"""Fuzzing of the JSONL-reading verbs: a few hundred mutated lines each (seeded), three properties.

Every verb that reads JSONL (``sandbox run``, ``score``, ``eval code --samples``, ``eval tests
--tests``, ``data validate``) gets lines derived from valid ones by truncation, type swaps, dropped
and unknown keys, non-UTF-8 bytes, lone surrogates, NUL characters, huge strings, deep nesting and
bare scalars. Whatever the line, the command must

* end with its documented exit code (0, 2 for a refused input, 1 for ``data validate`` with invalid
  rows) and never with a traceback;
* leave nothing behind but its own output: no stray file in the output directory, the working
  directory or the temporary directory;
* leave its input files byte-identical.

Batch verbs (``sandbox run``, ``score``, ``data validate``) take all lines in one file and must
answer every line. ``eval`` refuses a file with any bad line, so each line it refuses is tried
alone (cheap: it stops before any sandbox starts) and the lines it accepts are evaluated together.
Each verb also runs once as a separate process.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .reliability_cli import (
    FIXTURES,
    Outcome,
    Place,
    assert_one_line_error,
    place_fixture,  # noqa: F401 - the `place` fixture
    run_cli,
    run_process,
    tree,
)

pytestmark = pytest.mark.slow  # about a minute per verb on a busy two-core machine

SEED = 20261201
LINES = 300
PROBLEMS = FIXTURES / "eval" / "problems.jsonl"
PROBLEM_ROWS = [json.loads(line) for line in PROBLEMS.read_text().splitlines()]
IDS = {row["id"] for row in PROBLEM_ROWS}

ODD_VALUES: list[Any] = [None, 0, -1, 2.5, True, "", "x", [], [1], ["x", 2], {}, {"a": 1}, [[]], float("nan")]
BAD_BYTES = [b"\xff", b"\xfe\xff", b"\xc3", b"\x80abc", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"]
SCALARS = [b"null", b"1", b'"a string"', b"[]", b"true", b"NaN", b"{}", b"[{}]", b"-Infinity"]


def _strings(obj: Any, path: tuple = ()) -> list[tuple]:
    """Paths (key/index tuples) of every string inside ``obj``."""
    if isinstance(obj, str):
        return [path]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _strings(v, (*path, k))]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in _strings(v, (*path, i))]
    return []


def _containers(obj: Any, path: tuple = ()) -> list[tuple]:
    """Paths of every dict key and list element inside ``obj`` (not ``obj`` itself)."""
    out: list[tuple] = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        out.append((*path, k))
        out.extend(_containers(v, (*path, k)))
    return out


def _set(obj: Any, path: tuple, value: Any) -> None:
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value


def _get(obj: Any, path: tuple) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def mutate(rng: random.Random, seed_row: dict) -> bytes:
    """One mutated JSONL line (no newline) derived from ``seed_row``."""
    row = copy.deepcopy(seed_row)
    kind = rng.choice(
        ["truncate", "swap", "swap", "drop", "extra", "bytes", "bytes", "huge", "deep", "surrogate", "nul",
         "scalar", "bom", "duplicate", "long_list", "valid"]
    )  # fmt: skip
    if kind == "swap":
        _set(row, rng.choice(_containers(row)), copy.deepcopy(rng.choice(ODD_VALUES)))
    elif kind == "drop":
        path = rng.choice(_containers(row))
        container = _get(row, path[:-1])
        del container[path[-1]]
    elif kind == "extra":
        row[rng.choice(["tests", "golden", "x" * 50, "", "idd", "completions"])] = rng.choice(ODD_VALUES)
    elif kind == "huge" and (paths := _strings(row)):
        _set(
            row, rng.choice(paths), rng.choice(["x", "def f(:\n", "é", "\n"]) * rng.choice([10_000, 300_000])
        )
    elif kind == "surrogate" and (paths := _strings(row)):
        _set(row, rng.choice(paths), rng.choice(["\ud800", "a\udfff", "\udc80b"]))
    elif kind == "nul" and (paths := _strings(row)):
        path = rng.choice(paths)
        _set(row, path, _get(row, path) + "\x00")
    elif kind == "long_list":
        path = rng.choice(_containers(row))
        _set(row, path, [_get(row, path)] * 2_000)
    line = json.dumps(row, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    if kind == "truncate":
        return line[: rng.randrange(1, len(line))]
    if kind == "bytes":
        at = rng.randrange(len(line) + 1)
        return line[:at] + rng.choice(BAD_BYTES) + line[at:]
    if kind == "deep":
        depth = rng.choice([50, 5_000, 100_000])
        return b"[" * depth + line + b"]" * depth
    if kind == "scalar":
        return rng.choice(SCALARS)
    if kind == "bom":
        return b"\xef\xbb\xbf" + line
    if kind == "duplicate":
        return b'{"id": ' + rng.choice([b"1", b"null", b'"dup"']) + b", " + line[1:]
    return line


def mutated_lines(seed_rows: list[dict], n: int = LINES, seed: int = SEED) -> list[bytes]:
    """``n`` mutated lines (and the seed rows themselves, unmutated, first)."""
    rng = random.Random(seed)
    return [json.dumps(r).encode() for r in seed_rows] + [
        mutate(rng, rng.choice(seed_rows)) for _ in range(n)
    ]


def _write(place: Place, name: str, lines: list[bytes]) -> Path:
    path = place.data / name
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _answered(lines: list[bytes]) -> int:
    """Lines a batch verb must answer: the non-blank ones once the file is split at newlines."""
    return sum(1 for line in b"".join(x + b"\n" for x in lines).split(b"\n") if line.strip())


def _assert_clean(place: Place, data_before: dict[str, str], outputs: set[str]) -> None:
    assert tree(place.data) == data_before, "an input file changed"
    assert tree(place.cwd) == {}, tree(place.cwd)
    assert tree(place.tmp) == {}, tree(place.tmp)
    assert {p.split("/")[0] for p in tree(place.out)} <= outputs, tree(place.out)


def _assert_no_traceback(outcome: Outcome, allowed: set[int]) -> None:
    assert outcome.code in allowed, (outcome.code, outcome.err[-3000:])
    assert "Traceback" not in outcome.err and "Traceback" not in outcome.out, outcome.err[-3000:]
    if outcome.code == 2:
        assert_one_line_error(outcome, alone=False)


# --------------------------------------------------------------------------------------------------
# Batch verbs: every line answered in one run
# --------------------------------------------------------------------------------------------------

JOB = {
    "id": "neg",
    "reference": "def f(x):\n    return -x\n",
    "entry_point": "f",
    "codes": ["def f(x):\n    return -x\n", "def f(x):\n    return x\n"],
    "tests": [{"call": "f(2)", "predicted": "-2"}, {"call": "f(0)", "predicted": "1"}],
}
SCORE_ROW = json.loads((FIXTURES / "score" / "worked_example.jsonl").read_text().splitlines()[0])
SANDBOX_OPTIONS = ["--workers", "2", "--test-cpu-s", "0.5", "--load-cpu-s", "1"]


@pytest.mark.parametrize(
    ("verb", "seed_rows", "options"),
    [
        (["sandbox", "run"], [JOB], SANDBOX_OPTIONS),
        (["score"], [SCORE_ROW], ["--workers", "2"]),
    ],
    ids=["sandbox-run", "score"],
)
def test_batch_verb_answers_every_line(
    place: Place,
    capsys: pytest.CaptureFixture[str],
    verb: list[str],
    seed_rows: list[dict],
    options: list[str],
) -> None:
    lines = mutated_lines(seed_rows)
    src = _write(place, "in.jsonl", lines)
    before = tree(place.data)
    out = place.out / "results.jsonl"
    outcome = run_cli([*verb, "--input", src, "--output", out, *options], capsys)
    _assert_no_traceback(outcome, {0})
    rows = [json.loads(line) for line in out.read_bytes().decode("utf-8").splitlines()]
    assert len(rows) == _answered(lines)
    assert sum("error" in r for r in rows) > LINES // 3  # the mutations did reach the row checks
    _assert_clean(place, before, {"results.jsonl"})

    # the same verb as a process, on a slice of the lines
    part = _write(place, "part.jsonl", lines[:60])
    before = tree(place.data)
    outcome = run_process([*verb, "--input", part, "--output", out, *options], place.cwd, tmpdir=place.tmp)
    _assert_no_traceback(outcome, {0})
    assert len(out.read_text(encoding="utf-8").splitlines()) == _answered(lines[:60])
    _assert_clean(place, before, {"results.jsonl"})


def test_data_validate_reports_every_bad_row(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    lines = mutated_lines(PROBLEM_ROWS)
    src = _write(place, "problems.jsonl", lines)
    before = tree(place.data)
    outcome = run_cli(["data", "validate", src], capsys)
    _assert_no_traceback(outcome, {1})
    summary = outcome.out.splitlines()[-1]
    valid, invalid = int(summary.split()[0]), int(summary.rsplit(",", 1)[1].split()[0])
    assert valid >= len(PROBLEM_ROWS) and invalid > LINES // 3
    _assert_clean(place, before, set())

    outcome = run_process(["data", "validate", src], place.cwd, tmpdir=place.tmp)
    _assert_no_traceback(outcome, {1})
    assert outcome.out.splitlines()[-1] == summary
    _assert_clean(place, before, set())


# --------------------------------------------------------------------------------------------------
# eval: a refused line alone, the accepted ones together
# --------------------------------------------------------------------------------------------------

CLAMP = "```python\ndef clamp(x, lo, hi):\n    return min(max(x, lo), hi)\n```"
SAMPLE_ROWS = [
    {"id": "fx/clamp", "completion": CLAMP},
    {"id": "fx/fizz", "solution": "def fizz(n):\n    return str(n)\n"},
    {"id": "fx/vowels", "completion": "no code here"},
]
SUITE_ROWS = [
    {"id": "fx/clamp", "tests": ["assert clamp(5, 0, 10) == 5", "assert clamp(-1, 0, 10) == 0"]},
    {"id": "fx/fizz", "completion": "```python\nassert fizz(3) == 'Fizz'\n```"},
    {"id": "fx/vowels", "tests": ["assert count_vowels('a') == 1"]},
]


def _decoded(line: bytes) -> Any:
    try:
        row = json.loads(line.decode("utf-8"))
        json.dumps(row, ensure_ascii=False).encode("utf-8")
        return row
    except (ValueError, RecursionError):
        return None


def _known_id(row: Any) -> bool:
    if not isinstance(row, dict):
        return False
    pid = row.get("id", row.get("task_id"))
    return isinstance(pid, str) and pid in IDS


def _usable_sample(line: bytes) -> bool:
    row = _decoded(line)
    return _known_id(row) and (isinstance(row.get("solution"), str) or isinstance(row.get("completion"), str))


def _usable_suite(line: bytes) -> bool:
    row = _decoded(line)
    if not _known_id(row):
        return False
    tests = row.get("tests")
    return (isinstance(tests, list) and all(isinstance(t, str) for t in tests)) or isinstance(
        row.get("completion"), str
    )


EVAL_CASES = {
    "eval-code": (["eval", "code", "--samples"], SAMPLE_ROWS, _usable_sample, []),
    "eval-tests": (
        ["eval", "tests", "--tests"],
        SUITE_ROWS,
        _usable_suite,
        ["--k", "2", "--max-mutants", "2"],
    ),
}


@pytest.mark.parametrize("case", sorted(EVAL_CASES))
def test_eval_refuses_bad_lines_and_evaluates_good_ones(
    place: Place, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    verb, seed_rows, usable, extra = EVAL_CASES[case]
    usable_check: Callable[[bytes], bool] = usable
    lines = mutated_lines(seed_rows)
    accepted = [line for line in lines if usable_check(line)]
    refused = [line for line in lines if not usable_check(line)]
    assert len(refused) > LINES // 3 and len(accepted) >= len(seed_rows)
    common = ["--data", PROBLEMS, "--cache-dir", place.out / "cache", "--results-dir", place.out / "results"]
    common += ["--workers", "2", "--budget-floor", "1", *extra]
    name = verb[-1].lstrip("-") + ".jsonl"
    path = _write(place, name, [])
    codes: dict[int, int] = {}
    for line in refused:
        path.write_bytes(line + b"\n")
        before = tree(place.data)
        outcome = run_cli([*verb, path, *common], capsys)
        _assert_no_traceback(outcome, {0, 2})  # 0: a line that only looked unusable
        codes[outcome.code] = codes.get(outcome.code, 0) + 1
        _assert_clean(place, before, {"cache", "results"})
    assert codes.get(2, 0) > LINES // 3

    _write(place, name, accepted)
    before = tree(place.data)
    outcome = run_cli([*verb, path, *common, "--output", place.out / "metrics.json"], capsys)
    _assert_no_traceback(outcome, {0})
    _assert_clean(place, before, {"cache", "results", "metrics.json"})

    # one refused and one accepted run as processes
    outcome = run_process([*verb, path, *common], place.cwd, tmpdir=place.tmp)
    _assert_no_traceback(outcome, {0})
    path.write_bytes(refused[0] + b"\n")
    before = tree(place.data)
    outcome = run_process([*verb, path, *common], place.cwd, tmpdir=place.tmp)
    _assert_no_traceback(outcome, {2})
    _assert_clean(place, before, {"cache", "results", "metrics.json"})
