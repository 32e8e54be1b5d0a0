"""Harnesses that cannot fail are found by sentinel candidates, reported, and fixed by errata."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from codea1.cli import main
from codea1.eval.budgets import measure_reference
from codea1.eval.errata import apply_errata
from codea1.types import Problem

REPO = Path(__file__).resolve().parents[2]
PARQUET = REPO.parent / "shared" / "data" / "evalplus_humaneval_mbpp_plus.parquet"
REFERENCE = "def inc(x):\n    return x + 1\n"
ASSERTING = "def check(candidate):\n    assert candidate(1) == 2\n"
NOT_ASSERTING = "def check(candidate):\n    exact_match = candidate(1) == 2\n"
SWALLOWING = "def check(candidate):\n    try:\n        assert candidate(1) == 2\n    except BaseException:\n        pass\n"


def _problem(harness: str) -> Problem:
    return Problem(
        id="t/inc", question="def inc(x):\n", entry_point="inc", reference=REFERENCE, harness=harness
    )


@pytest.mark.parametrize(
    "harness, vacuous",
    [
        (ASSERTING, ""),
        (NOT_ASSERTING, "returns object(), returns a constant string"),
        (SWALLOWING, "returns object(), returns a constant string, raises"),
    ],
)
def test_sentinels_find_harnesses_that_cannot_fail(harness: str, vacuous: str) -> None:
    timing = measure_reference(_problem(harness))
    assert timing.ok and timing.vacuous == vacuous


def test_eval_code_reports_a_vacuous_harness(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    row = {"id": "t/inc", "question": "def inc(x):\n", "entry_point": "inc", "reference": REFERENCE,
           "harness": NOT_ASSERTING}  # fmt: skip
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps(row) + "\n")
    samples = tmp_path / "s.jsonl"
    samples.write_text(json.dumps({"id": "t/inc", "solution": "def inc(x):\n    return 'wrong'\n"}) + "\n")
    argv = ["eval", "code", "--data", str(data), "--samples", str(samples), "--n", "1", "--workers", "1"]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--results-dir", str(tmp_path / "r")]
    assert main(argv) == 0
    assert "warning: the harness of t/inc cannot fail" in capsys.readouterr().err


@pytest.mark.skipif(not PARQUET.is_file(), reason="the shared evalplus parquet is absent")
def test_mbpp_plus_vacuous_harnesses_are_fixed_by_errata(monkeypatch: pytest.MonkeyPatch) -> None:
    from codea1.data.problems import load_problems

    monkeypatch.setenv("CODEA1_EVALPLUS_PARQUET", str(PARQUET))
    ids = ("MBPP/737", "MBPP/787", "MBPP/794")
    raw = [p for p in load_problems("mbppplus") if p.id in ids]
    assert [p.id for p in raw] == list(ids)
    for p in raw:
        assert measure_reference(p).vacuous, p.id
    patched, reports = apply_errata(raw)
    assert [r.outcome for r in reports] == ["patched"] * 3
    for p in patched:
        timing = measure_reference(p)
        assert timing.ok and not timing.vacuous, (p.id, timing)
        wrong = dataclasses.replace(p, reference=f"def {p.entry_point}(*a):\n    return 'wrong'\n")
        assert not measure_reference(wrong).ok
