"""UnLeakedTestBench as a data source: ult:PATH, ULT's import header, the example tests kept apart,
and one-line errors for bad rows."""

import json
from pathlib import Path

import pytest

from codea1.cli import main
from codea1.data.loaders.ult import STDLIB_HEADER, convert_ult, header_and_needs
from codea1.data.problems import DataError, load_problems, validate_problems
from codea1.data.rows import repo_root

LITE = repo_root().parent / "shared" / "data" / "ULT_Lite.json"
ROW = {
    "func_name": "clip",
    "code": "def clip(x, lo, hi):\n    if x < lo:\n        return lo\n    return min(x, hi)",
    "prompt": "Clamp x into [lo, hi].",
    "task_id": "7",
    "test_list": ["assert clip(5, 0, 3) == 3", "assert clip(-1, 0, 3) == 1"],
}


def _write(tmp_path: Path, rows: list, name: str = "ult.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(rows, indent=1))
    return path


def test_a_row_becomes_a_problem_under_ults_header_with_its_example_tests_apart(tmp_path):
    (p,) = load_problems(f"ult:{_write(tmp_path, [ROW])}")
    assert (p.id, p.entry_point, p.source) == ("ult/7", "clip", "ult")
    assert p.reference.startswith("\n".join(STDLIB_HEADER)) and p.reference.endswith("return min(x, hi)\n")
    assert p.imports.strip() == "\n".join(STDLIB_HEADER)
    assert p.question.startswith("def clip(x, lo, hi):") and "Clamp x into [lo, hi]." in p.question
    assert p.golden_tests == ()  # not a ground-truth suite (one of the two is wrong)
    assert p.metadata["example_tests"] == ROW["test_list"]
    assert p.metadata["function"] == ROW["code"] and p.metadata["needs"] == []
    # the same file given as a plain path is detected as ULT's format; an integer task id works
    (q,) = load_problems(str(_write(tmp_path, [{**ROW, "task_id": 7}], "plain.json")))
    assert q.id == "ult/7"


def test_numpy_and_pandas_lines_come_only_with_a_function_that_names_them():
    header, needs = header_and_needs("def f(a):\n    import six\n    return np.sum(a) + pd.Series(a).max()")
    assert (
        "import numpy as np" in header and "import pandas as pd" in header and "import pytest" not in header
    )
    assert needs == ("numpy", "pandas", "six")
    header, needs = header_and_needs(
        "import collections.abc\nfrom typing import List\ndef f(a):\n    return a"
    )
    assert "numpy" not in header and needs == ()


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"func_name": None}, "func_name", "missing"),
        ({"code": 3}, "code", "expected a string, got int"),
        ({"task_id": None}, "task_id", "missing"),
        ({"test_list": "assert clip(1, 0, 3) == 1"}, "test_list", "expected a list of strings"),
        ({"test_list": ["assert clip(1, 0, 3) == 1", "assert clip(("]}, "test_list[1]", "does not parse"),
        ({"code": "def clip(x:\n    return x"}, "reference", "does not parse"),
        ({"func_name": "clamp"}, "reference", "does not define the entry point 'clamp'"),
    ],
)
def test_bad_fields_are_named_in_one_line(tmp_path, change, field, reason):
    path = _write(tmp_path, [ROW, {**ROW, "task_id": "8", **change}])
    report = validate_problems(f"ult:{path}")
    assert report.total == 1 and len(report.invalid) >= 1
    first = report.invalid[0]
    assert (first.row, first.field) == (2, field) and reason in first.reason
    assert "\n" not in str(first)


def test_ult_spec_refuses_other_formats_and_missing_files(tmp_path):
    ours = tmp_path / "ours.json"
    ours.write_text(
        json.dumps([{"id": "a", "question": "q", "entry_point": "f", "reference": "def f(): pass"}])
    )
    with pytest.raises(DataError, match="missing column"):
        load_problems(f"ult:{ours}")
    with pytest.raises(DataError, match="no such file"):
        load_problems(f"ult:{tmp_path / 'nope.json'}")
    with pytest.raises(DataError, match="give the path"):
        load_problems("ult:")
    broken = tmp_path / "broken.json"
    broken.write_text('[{"func_name": "f",')
    report = validate_problems(f"ult:{broken}")
    assert report.invalid[0].field == "<json>" and "not valid JSON" in report.invalid[0].reason


def test_data_validate_exits_1_on_a_bad_row(tmp_path, capsys):
    path = _write(tmp_path, [ROW, {**ROW, "task_id": "8", "test_list": [1]}])
    assert main(["data", "validate", f"ult:{path}"]) == 1
    out = capsys.readouterr().out
    assert "row 2 (id 'ult/8'): field 'test_list': expected a list of strings" in out
    assert "1 problems (1 ult), 1 invalid" in out


def test_converter_alone_reports_without_raising():
    problem, issues = convert_ult({"func_name": 5, "code": None})
    assert problem is not None
    assert {f for f, _ in issues} == {"task_id", "func_name", "code"}


@pytest.mark.skipif(not LITE.is_file(), reason=f"ULT-Lite not found at {LITE}")
def test_ult_lite_loads_whole():
    report = validate_problems(f"ult:{LITE}")
    assert report.ok and report.counts == {"ult": 200}
    problems = load_problems(f"ult:{LITE}")
    assert sum(len(p.metadata["example_tests"]) for p in problems) == 1000
