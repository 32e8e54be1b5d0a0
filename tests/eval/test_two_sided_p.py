"""Two-sided p by default in every comparison output, a one-sided p only on request and labelled;
``codea1 eval compare`` with several files per side (seeds), averaged per problem before pairing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codea1.cli import main
from codea1.core.bootstrap import paired_bootstrap
from codea1.core.comparison import compare_sides, delta_table
from tests.report.fake_runs import fake_run
from tests.report.test_compare_methods import points


def _rec(pid: str, killed: int, live: int = 4, valid: int = 4) -> dict:
    return {"id": pid, "source": "S", "k": 4, "valid": valid, "killed": killed, "mutants": live,
            "equivalent": 0, "tests": []}  # fmt: skip


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text(json.dumps({"run_key": {"k": 4}}) + "\n" + "".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_delta_table_reports_the_two_sided_p_and_the_one_sided_only_when_asked() -> None:
    # three problems, all better by the same amount: two of the 8 sign patterns are as far from 0
    d = paired_bootstrap([0.0, 0.0, 0.0], [0.5, 0.5, 0.5], resamples=100)
    row = delta_table({"S": d})["S"]
    assert row["p_two_sided"] == pytest.approx(2 / 8)
    assert not [key for key in row if key.startswith("p_") and key != "p_two_sided"]  # no unlabelled p
    labelled = delta_table({"S": d}, one_sided=True)["S"]
    assert labelled["p_one_sided_after_better"] == pytest.approx(1 / 8)
    assert labelled["p_two_sided"] == pytest.approx(2 / 8)


def test_a_worse_after_gets_a_small_two_sided_p_not_one() -> None:
    """The LOG's tell: a difference below 0 printed with p 1.00 (one-sided). Two-sided it is small."""
    before, after = [1.0] * 6, [0.0] * 6
    row = delta_table({"S": paired_bootstrap(before, after, resamples=100)})["S"]
    assert row["delta"] == pytest.approx(-100.0) and row["p_two_sided"] == pytest.approx(2 / 64)


def test_several_files_per_side_are_averaged_per_problem_before_pairing() -> None:
    seed0 = [_rec("a", 0), _rec("b", 4), _rec("c", 2)]
    seed1 = [_rec("a", 2), _rec("b", 2), _rec("c", 2)]
    base = [_rec("a", 0), _rec("b", 0), _rec("c", 0)]
    d = compare_sides([base], [seed0, seed1], resamples=200, metric="killed")["S"]
    # per problem after: a (0 + 0.5)/2, b (1 + 0.5)/2, c 0.5; the pairing is of those means
    expected = paired_bootstrap([0.0, 0.0, 0.0], [0.25, 0.75, 0.5], resamples=200)
    assert (d.after, d.delta, d.ci_low, d.ci_high, d.p_two_sided, d.problems) == pytest.approx(
        (expected.after, expected.delta, expected.ci_low, expected.ci_high, expected.p_two_sided, 3)
    )
    with pytest.raises(ValueError, match="file 2 scores other problems than file 1"):
        compare_sides([base], [seed0, seed1[:2]], metric="killed")


def test_eval_compare_takes_several_files_per_side(tmp_path: Path, capsys) -> None:
    base = _write(tmp_path / "base.jsonl", [_rec("a", 0), _rec("b", 0), _rec("c", 0)])
    base1 = _write(tmp_path / "base1.jsonl", [_rec("a", 0), _rec("b", 2), _rec("c", 0)])
    s0 = _write(tmp_path / "s0.jsonl", [_rec("a", 0), _rec("b", 4), _rec("c", 2)])
    s1 = _write(tmp_path / "s1.jsonl", [_rec("a", 2), _rec("b", 2), _rec("c", 2)])
    out = tmp_path / "cmp.json"
    argv = ["eval", "compare", "--before", str(base), str(base1), "--after", str(s0), str(s1)]
    assert main([*argv, "--metric", "killed", "--resamples", "200", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "p_two_sided" in printed and "each problem averaged over a side's files" in printed
    saved = json.loads(out.read_text())
    row = saved["S"]
    assert row["before"] == pytest.approx(100 * 0.25 / 3) and row["after"] == pytest.approx(50.0)
    assert "p_one_sided_after_better" not in row and "p_sign_flip" not in row
    assert saved["comparison"]["before"] == [str(base), str(base1)]
    assert main([*argv, "--metric", "killed", "--resamples", "200", "--one-sided"]) == 0
    assert "p_one_sided_after_better" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["A", "B", "--before", "A"], "not both"),
        (["A"], "give two results files"),
        (["--before", "A"], "both --before FILE... and --after FILE..."),
        (["--before", "A", "B", "--after", "A"], "given twice"),
    ],
)
def test_eval_compare_sides_are_given_one_way(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    files = {
        "A": _write(tmp_path / "a.jsonl", [_rec("a", 0)]),
        "B": _write(tmp_path / "b.jsonl", [_rec("a", 1)]),
    }
    assert main(["eval", "compare", *[str(files.get(x, x)) for x in argv]]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_codea1_compare_names_its_p_two_sided_and_labels_a_one_sided_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = fake_run(tmp_path, "a1", points(lambda i, p: 3), {"train.method": "a1"})
    b = fake_run(tmp_path, "golden", points(lambda i, p: 1), {"train.method": "golden"})
    out_json = tmp_path / "cmp.json"
    assert main(["compare", str(a), str(b), "--resamples", "200", "--output", str(out_json)]) == 0
    assert "p_two_sided" in capsys.readouterr().out
    result = json.loads(out_json.read_text())["pairs"][0]["result"]
    assert result["p_two_sided"] == pytest.approx(2 / 2**12) and "p_a_better" not in result
    assert not [key for key in result if key.startswith("p_") and key != "p_two_sided"]
    assert (
        main(["compare", str(a), str(b), "--resamples", "200", "--one-sided", "--output", str(out_json)]) == 0
    )
    assert "p_one_sided_a_better" in capsys.readouterr().out
    result = json.loads(out_json.read_text())["pairs"][0]["result"]
    assert result["p_one_sided_a_better"] == pytest.approx(1 / 2**12)
