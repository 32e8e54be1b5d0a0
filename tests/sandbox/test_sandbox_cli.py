"""``codea1 sandbox run`` and ``doctor`` through the CLI dispatcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codea1.cli import main


def test_run_writes_one_line_per_input_including_errors(tmp_path: Path) -> None:
    good = {"id": "p", "reference": "def f(x):\n    return -x\n", "entry_point": "f",
            "codes": ["def f(x):\n    return -x\n", "def f(x):\n    return x\n"],
            "tests": [{"call": "f(2)", "predicted": "-2"}, {"call": "f(0)", "predicted": "1"}]}  # fmt: skip
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(good) + "\n{broken\n" + json.dumps({"id": "q", "codes": 3}) + "\n\n")
    out = tmp_path / "out.jsonl"
    assert main(["sandbox", "run", "--input", str(src), "--output", str(out), "--workers", "1"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["p", "line-2", "q"]
    assert [o["status"] for o in rows[0]["oracle"]] == ["valid", "wrong_prediction"]
    assert [[c["status"] for c in row] for row in rows[0]["grid"]] == [["pass", "pass"], ["fail", "pass"]]
    assert "error" in rows[1] and "error" in rows[2]


def test_run_missing_input_is_a_user_error(tmp_path: Path) -> None:
    assert main(["sandbox", "run", "--input", str(tmp_path / "nope"), "--output", "-"]) == 2


def test_doctor_lists_layers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sandbox", "doctor"]) == 0
    text = capsys.readouterr().out
    for layer in ("net_ns", "pid_ns", "mount_ns", "seccomp", "landlock", "rlimits", "cgroup_pids"):
        assert layer in text


def test_run_takes_the_questions_names_and_helpers(tmp_path: Path) -> None:
    """A job line may carry the question's names (a test using a name only the reference defines is
    invalid) and helper source (a test calls the question's helper, not the candidate's)."""
    ref = "def is_sorted(xs):\n    return xs == sorted(xs)\n\ndef _h(x):\n    return x\n\ndef f(xs):\n    return sorted(xs)\n"
    job = {"id": "q", "reference": ref, "entry_point": "f",
           "codes": ["def is_sorted(xs):\n    return True\n\ndef f(xs):\n    return xs\n"],
           "tests": [{"call": "is_sorted(f([2, 1]))", "predicted": "True"}, {"call": "f(_h([1]))", "predicted": "[1]"}],
           "question_names": ["f", "is_sorted"], "question_helpers": "def is_sorted(xs):\n    return xs == sorted(xs)\n"}  # fmt: skip
    bad = [dict(job, id="n", question_names="f"), dict(job, id="h", question_helpers=["x"])]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(j) for j in (job, *bad)) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["sandbox", "run", "--input", str(src), "--output", str(out), "--workers", "1"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [o["status"] for o in rows[0]["oracle"]] == ["valid", "invalid"]
    assert rows[0]["oracle"][1]["reason"].startswith("test uses _h")
    assert [c["status"] for c in rows[0]["grid"][0]] == ["fail", "invalid"]
    assert rows[1]["error"].endswith("'question_names' must be a list of strings")
    assert rows[2]["error"].endswith("'question_helpers' must be a string")
