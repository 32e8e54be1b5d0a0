"""`codea1 eval bon --samples --tests`: the sample passing most generated tests is chosen."""

import json
from pathlib import Path

import pytest

from codea1.cli import main

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "eval"


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_bon_picks_the_sample_that_passes_the_generated_tests(tmp_path):
    fence = "```python\n{}\n```"
    codes = [
        ("fx/clamp", "def clamp(x, lo, hi):\n    return max(x, lo)"),
        ("fx/clamp", "def clamp(x, lo, hi):\n    return min(max(x, lo), hi)"),
        ("fx/clamp", "def clamp(x, lo, hi):\n    return x"),
        ("fx/vowels", "def count_vowels(s):\n    return len(s)"),
        ("fx/vowels", "def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)"),
    ]
    samples = _jsonl(tmp_path / "codes.jsonl", [{"id": i, "completion": fence.format(c)} for i, c in codes])
    suites = [
        {"id": "fx/clamp", "tests": ["assert clamp(12, 0, 10) == 10", "assert clamp(-1, 0, 10) == 0"]},
        {
            "id": "fx/clamp",
            "tests": ["assert clamp(5, 0, 10) == 5", "assert clamp(2.5, 0.0, 10.0) == 2.5000000001"],
        },
        # A wrong prediction (3) makes both vowel samples fail it; the lowercase sample wins on the rest.
        {"id": "fx/vowels", "tests": ["assert count_vowels('xyz') == 0", "assert count_vowels('ab') == 3"]},
    ]
    tests = _jsonl(tmp_path / "suites.jsonl", suites)
    out = tmp_path / "bon.json"
    argv = ["eval", "bon", "--data", str(FIXTURES / "problems.jsonl"), "--samples", str(samples)]
    argv += ["--tests", str(tests), "--output", str(out), "--results-dir", str(tmp_path / "r")]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--workers", "2"]
    assert main(argv) == 0
    m = json.loads(out.read_text())
    # clamp: the correct sample passes all 4 tests (float tolerance), the others fewer -> chosen 1.
    # vowels: the lowercase sample (wrong on 'AEIOU') passes 1 of 2, len(s) passes 0 -> chosen 0.
    assert m["benchA"]["chosen@1"] == pytest.approx(100.0)
    assert m["benchA"]["random@1"] == pytest.approx(100.0 / 3)
    assert m["benchB"]["chosen@1"] == 0.0 and m["benchB"]["oracle"] == 0.0
    assert m["all"]["oracle"] == pytest.approx(50.0)
