"""`codea1 eval compare`: per-benchmark paired deltas from two `eval code` runs of the same problems."""

import json
from pathlib import Path

import pytest

from codea1.cli import main
from codea1.core.comparison import compare_records, delta_table

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
RIGHT = {
    "fx/clamp": "```python\ndef clamp(x, lo, hi):\n    return min(max(x, lo), hi)\n```",
    "fx/vowels": "```python\ndef count_vowels(s):\n    return sum(c in 'aeiouAEIOU' for c in s)\n```",
}
WRONG = {
    "fx/clamp": "```python\ndef clamp(x, lo, hi):\n    return max(x, lo)\n```",
    "fx/vowels": "```python\ndef count_vowels(s):\n    return sum(c in 'aeiou' for c in s)\n```",
}
FIZZ = "```python\ndef fizz(n):\n    return str(n)\n```"  # wrong in both runs


def _rec(pid: str, source: str, correct: list[bool]) -> dict:
    return {"id": pid, "source": source, "correct": correct}


def test_compare_records_groups_by_benchmark_and_scores_fractions() -> None:
    before = [_rec("a", "A", [False, False]), _rec("b", "A", [True, True]), _rec("c", "B", [False, True])]
    after = [_rec("a", "A", [True, False]), _rec("b", "A", [True, True]), _rec("c", "B", [True, True])]
    deltas = compare_records(before, after, resamples=300)
    assert set(deltas) == {"A", "B", "all"}
    assert deltas["A"].delta == pytest.approx(0.25) and deltas["B"].delta == pytest.approx(0.5)
    assert deltas["all"].delta == pytest.approx((0.5 + 0 + 0.5) / 3)
    row = delta_table(deltas)["all"]
    assert row["before"] == pytest.approx(50.0) and row["improved"] == 2 and row["problems"] == 3


def test_compare_records_refuses_different_problem_sets() -> None:
    with pytest.raises(ValueError, match="1 only before, 0 only after"):
        compare_records([_rec("a", "A", [True]), _rec("b", "A", [True])], [_rec("a", "A", [True])])
    with pytest.raises(ValueError, match="'correct' list"):
        compare_records([{"id": "a"}], [_rec("a", "A", [True])])


def _eval(tmp_path: Path, name: str, rows: list[dict]) -> Path:
    samples = tmp_path / f"{name}.jsonl"
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / f"{name}.json"
    argv = ["eval", "code", "--data", str(FIXTURES / "problems.jsonl"), "--samples", str(samples)]
    argv += ["--output", str(out), "--results-dir", str(tmp_path / "results")]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--workers", "2"]
    assert main(argv) == 0
    return out


def test_cli_compares_two_evaluations_through_their_metrics_files(tmp_path, capsys) -> None:
    before = _eval(
        tmp_path,
        "before",
        [{"id": k, "completion": v} for k, v in WRONG.items()] + [{"id": "fx/fizz", "completion": FIZZ}],
    )
    after = _eval(
        tmp_path,
        "after",
        [{"id": "fx/clamp", "completion": RIGHT["fx/clamp"]}]
        + [
            {"id": "fx/vowels", "completion": WRONG["fx/vowels"]},
            {"id": "fx/fizz", "completion": FIZZ},
        ],
    )
    assert Path(json.loads(before.read_text())["results"]).is_file()
    out = tmp_path / "cmp.json"
    assert main(["eval", "compare", str(before), str(after), "--resamples", "500", "--output", str(out)]) == 0
    table = json.loads(out.read_text())
    # benchA = clamp + fizz (clamp fixed), benchB = vowels (unchanged); the sandbox judged every sample.
    assert table["benchA"]["delta"] == pytest.approx(50.0) and table["benchA"]["improved"] == 1
    assert table["benchB"]["delta"] == 0.0 and table["benchB"]["ci95_high"] == 0.0
    assert table["all"]["before"] == 0.0 and table["all"]["after"] == pytest.approx(100 / 3)
    assert "benchA" in capsys.readouterr().out


def test_cli_compare_errors_are_clear(tmp_path, capsys) -> None:
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"all": {"pass@1": 1.0}}))
    other = tmp_path / "other.json"
    other.write_text(bare.read_text())
    assert main(["eval", "compare", str(bare), str(other)]) == 2
    assert "without a 'results' file" in capsys.readouterr().err
    assert main(["eval", "compare", str(tmp_path / "missing.jsonl"), str(bare)]) == 2
    assert "no such file" in capsys.readouterr().err


def _tests_rec(pid: str, valid: int, killed: int, mutants: int = 4, equivalent: int = 0) -> dict:
    return {"id": pid, "source": "S", "k": 4, "valid": valid, "killed": killed, "mutants": mutants,
            "equivalent": equivalent, "tests": []}  # fmt: skip


def test_tests_records_compare_by_validity_per_requested_test_and_by_killed_mutants() -> None:
    before = [_tests_rec("a", 1, 0), _tests_rec("b", 0, 0), _tests_rec("c", 2, 1, mutants=2, equivalent=2)]
    after = [_tests_rec("a", 4, 2), _tests_rec("b", 2, 1), _tests_rec("c", 6, 2, mutants=2, equivalent=2)]
    valid = compare_records(before, after, resamples=200, metric="valid")["S"]
    assert valid.before == pytest.approx((0.25 + 0 + 0.5) / 3) and valid.after == pytest.approx(
        (1 + 0.5 + 1) / 3
    )
    killed = compare_records(before, after, resamples=200, metric="killed")["S"]
    assert killed.problems == 2  # c has no live mutant: left out on both sides
    assert killed.delta == pytest.approx((0.5 + 0.25) / 2)
    with pytest.raises(ValueError, match="use --metric valid or killed"):
        compare_records(before, after, metric="pass")
    with pytest.raises(ValueError, match="an `eval tests` record"):
        compare_records([_rec("a", "A", [True])], [_rec("a", "A", [True])], metric="valid")


def test_cli_compare_keeps_the_problems_of_a_spec_and_reads_tests_results(tmp_path, capsys) -> None:
    def write(name: str, rows: list[dict]) -> Path:
        path = tmp_path / f"{name}.jsonl"
        path.write_text(
            json.dumps({"run_key": {"k": 4}}) + "\n" + "".join(json.dumps(r) + "\n" for r in rows)
        )
        return path

    ids = ["demo/easy/add", "demo/easy/multiply", "demo/easy/double"]  # two easy-train, one easy-heldout
    before = write("before", [_tests_rec(i, 0, 0) for i in ids])
    after = write("after", [_tests_rec(i, 4, 4) for i in ids])
    out = tmp_path / "cmp.json"
    argv = ["eval", "compare", str(before), str(after), "--metric", "valid", "--problems", "demo:easy-train"]
    assert main([*argv, "--output", str(out)]) == 0
    row = json.loads(out.read_text())["S"]
    assert row["problems"] == 2 and row["delta"] == pytest.approx(100.0)
    assert row["p_two_sided"] == pytest.approx(0.5)  # 2 problems: 2 of 4 sign patterns are as far from 0
    assert main([*argv[:-1], "demo:heldout"]) == 2
    assert "none of its 16 problems" in capsys.readouterr().err


def _eval_tests(tmp_path: Path, name: str, suites: dict[str, list[str]]) -> Path:
    tests = tmp_path / f"{name}-tests.jsonl"
    tests.write_text("".join(json.dumps({"id": pid, "tests": lines}) + "\n" for pid, lines in suites.items()))
    out = tmp_path / f"{name}.json"
    argv = ["eval", "tests", "--data", str(FIXTURES / "problems.jsonl"), "--tests", str(tests), "--k", "2"]
    argv += ["--max-mutants", "4", "--output", str(out), "--results-dir", str(tmp_path / "results")]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--workers", "2"]
    assert main(argv) == 0
    return out


def test_cli_compares_two_test_evaluations_through_their_metrics_files(tmp_path) -> None:
    """`eval tests --output` names its per-problem file, so `eval compare` takes the metrics file."""
    before = _eval_tests(tmp_path, "before", {"fx/clamp": ["assert clamp(5, 0, 10) == 4"]})
    after = _eval_tests(
        tmp_path, "after", {"fx/clamp": ["assert clamp(5, 0, 10) == 5", "assert clamp(-3, 0, 10) == 0"]}
    )
    assert Path(json.loads(before.read_text())["results"]).is_file()
    out = tmp_path / "cmp.json"
    argv = ["eval", "compare", str(before), str(after), "--metric", "valid", "--resamples", "200"]
    assert main([*argv, "--output", str(out)]) == 0
    row = json.loads(out.read_text())["benchA"]
    # clamp: 0 of 2 requested tests valid before (the one test is wrong), 2 of 2 after
    assert row["before"] == 0.0 and row["after"] == 100.0 and row["improved"] == 1 and row["problems"] == 1
