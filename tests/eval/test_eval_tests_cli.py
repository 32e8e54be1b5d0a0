"""`codea1 eval tests --tests`: a strong hand-written suite beats a weak one on mut@k and coverage."""

import json
from pathlib import Path

import pytest

from codea1.cli import main

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "eval"


def _run(tmp_path: Path, tests_file: str, *extra: str) -> dict:
    out = tmp_path / f"{Path(tests_file).stem}.json"
    argv = [
        "eval",
        "tests",
        "--data",
        str(FIXTURES / "problems.jsonl"),
        "--tests",
        str(FIXTURES / tests_file),
    ]
    argv += ["--k", "5", "--output", str(out), "--results-dir", str(tmp_path / "results")]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--workers", "2", "--budget-floor", "1"]
    assert main([*argv, *extra]) == 0
    return json.loads(out.read_text())["all"]


def test_strong_suite_ranks_higher_than_weak_suite(tmp_path):
    strong = _run(tmp_path, "strong_tests.jsonl")
    weak = _run(tmp_path, "weak_tests.jsonl")
    assert strong["mut@5"] > weak["mut@5"]
    assert strong["line_cov"] > weak["line_cov"]
    assert strong["branch_cov"] > weak["branch_cov"]
    assert strong["Mul"] > weak["Mul"]
    # Strong: 15 correct tests of 3 x 5; weak: 3 correct (a wrong prediction and a tautology fail).
    assert strong["pass@5"] == pytest.approx(100.0)
    assert weak["pass@5"] == pytest.approx(100.0 * 3 / 15)
    assert strong["validity"] == pytest.approx(100.0)
    assert strong["equivalent"] >= 0 and strong["mutants"] > 0


def test_defect_detection_with_given_code_samples(tmp_path):
    rows = [
        {"id": "fx/clamp", "completion": "```python\ndef clamp(x, lo, hi):\n    return max(x, lo)\n```"},
        {
            "id": "fx/fizz",
            "completion": "```python\ndef fizz(n):\n    return 'Fizz' if n % 3 == 0 else str(n)\n```",
        },
        {"id": "fx/vowels", "completion": "```python\ndef count_vowels(s):\n    return len(s)\n```"},
    ]
    codes = tmp_path / "codes.jsonl"
    codes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    strong = _run(tmp_path, "strong_tests.jsonl", "--code-samples", str(codes))
    weak = _run(tmp_path, "weak_tests.jsonl", "--code-samples", str(codes))
    assert strong["wrong_codes"] == weak["wrong_codes"] == 3
    assert strong["detected"] == pytest.approx(100.0)
    # weak: clamp(5,0,10) passes max(x, lo); fizz(7) passes; only count_vowels('xyz') == 0 catches len(s)
    assert weak["detected"] == pytest.approx(100.0 / 3)
