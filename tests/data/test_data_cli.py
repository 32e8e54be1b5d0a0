"""`codea1 data validate` and `codea1 data inspect`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codea1.cli import main

REPO = Path(__file__).resolve().parents[2]
SHARED_PARQUET = REPO / ".." / "shared" / "data" / "evalplus_humaneval_mbpp_plus.parquet"


def test_validate_demo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "validate", "demo"]) == 0
    assert capsys.readouterr().out.strip() == "64 problems (64 demo), 0 invalid"


def test_validate_shared_parquet(capsys: pytest.CaptureFixture[str]) -> None:
    if not SHARED_PARQUET.is_file():
        pytest.skip("the shared evalplus parquet is absent (../shared/data/)")
    assert main(["data", "validate", str(SHARED_PARQUET)]) == 0
    assert capsys.readouterr().out.strip() == "542 problems (164 humanevalplus, 378 mbppplus), 0 invalid"


def test_validate_invalid_rows_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    row = {"id": "a", "question": "q", "entry_point": "f", "reference": "def f():\n    return 1\n"}
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps({**row, "reference": "def f(:"}) + "\n")
    assert main(["data", "validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert "p.jsonl: row 2 (id 'a'): field 'reference': does not parse" in out
    assert "p.jsonl: row 2 (id 'a'): field 'id': duplicate id 'a'" in out
    assert out.strip().endswith("1 problems (1 (no source)), 2 invalid")
    assert main(["data", "inspect", str(path)]) == 1


def test_unreadable_spec_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "validate", "no-such-set"]) == 2
    assert "unknown problem set 'no-such-set'" in capsys.readouterr().err


def test_inspect_shows_both_prompts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "inspect", "demo:heldout", "--id", "demo/dedupe", "--n-tests", "6"]) == 0
    out = capsys.readouterr().out
    assert "16 problems (16 demo), 0 invalid" in out and "=== problem demo/dedupe" in out
    assert out.count("[system]") == 3 and out.count("[user]") == 3
    assert "Buggy Code:\n```python\ndef dedupe(" in out and "Write 6 assertion-based test cases" in out
    assert main(["data", "inspect", "demo", "--index", "99"]) == 2
