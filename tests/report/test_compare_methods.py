"""``codea1 compare``: methods paired by problem at the last evaluation point, on fake run directories
(real config and results writers, hand-checkable numbers) and on two real scripted runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from codea1.cli import main
from codea1.data.problems import load_problems
from codea1.report.methods import compare_methods
from tests.report.fake_runs import K, code_record, fake_run, suite_record
from tests.scripted_run import SCRIPTED_RUN

IDS = [p.id for p in load_problems("demo:easy")]
TRAIN = {p.id for p in load_problems("demo:easy-train")}


def points(passed: Callable[[int, str], int], valid: Callable[[int, str], int] = lambda i, p: 2,
           killed: Callable[[int, str], int] = lambda i, p: 1) -> dict[int, Any]:  # fmt: skip
    """Step 0 and step 8 points over every problem of demo:easy (the values of step 8 given)."""
    base = ([code_record(p, 2) for p in IDS], [suite_record(p, 1, 0) for p in IDS])
    last = (
        [code_record(p, passed(i, p)) for i, p in enumerate(IDS)],
        [suite_record(p, valid(i, p), killed(i, p)) for i, p in enumerate(IDS)],
    )
    return {0: base, 8: last}


def result(cmp: Any, split: str, metric: str, a: str | None = None) -> Any:
    found = [r for r in cmp.results if r.split == split and r.metric == metric and (a is None or r.a == a)]
    assert len(found) == 1, found
    return found[0]


def test_identical_methods_differ_by_zero_with_p_one(tmp_path: Path) -> None:
    same = points(lambda i, p: i % 5, lambda i, p: i % 3, lambda i, p: i % 4)
    a = fake_run(tmp_path, "a1", same, {"train.method": "a1"})
    b = fake_run(tmp_path, "selfplay", same, {"train.method": "selfplay"})
    cmp = compare_methods([a, b], resamples=500)
    assert cmp.step == 8 and cmp.problems == {"training": 12, "held-out": 9}
    assert [m.label for m in cmp.methods] == ["a1", "selfplay"]
    metrics = {r.metric for r in cmp.results}
    assert metrics == {"coder/pass@1", "tester/validity", f"tester/pass@{K}", f"tester/mut@{K}", "tester/Mul"}
    for r in cmp.results:
        d = r.delta
        assert (d.delta, d.ci_low, d.ci_high, d.p_two_sided, d.improved, d.worsened) == (0, 0, 0, 1.0, 0, 0)


def test_a_constant_shift_is_the_interval(tmp_path: Path) -> None:
    # a1 passes one more of 4 samples on every problem: +25 points, on every resample
    a = fake_run(tmp_path, "a1", points(lambda i, p: 1 + i % 3), {"train.method": "a1"})
    b = fake_run(tmp_path, "golden", points(lambda i, p: i % 3), {"train.method": "golden"})
    cmp = compare_methods([a, b], resamples=500)
    for split, n in (("training", 12), ("held-out", 9)):
        d = result(cmp, split, "coder/pass@1").delta
        assert d.delta == pytest.approx(0.25) and (d.ci_low, d.ci_high) == pytest.approx((0.25, 0.25))
        assert (d.improved, d.worsened, d.problems) == (n, 0, n)
        assert d.p_two_sided == pytest.approx(2 / 2**n)  # only all-plus and all-minus are as extreme
    # the step-8 levels are the split's own means (hand-computed from i % 3 over the split's indices)
    training = [i for i, p in enumerate(IDS) if p in TRAIN]
    d = result(cmp, "training", "coder/pass@1").delta
    assert d.before == pytest.approx(sum(i % 3 for i in training) / 4 / len(training))


def test_seeds_are_averaged_per_problem_before_pairing(tmp_path: Path) -> None:
    # a1 seed 0 passes 4 of 4, seed 1 passes 2 of 4 on every problem: 75 % per problem; golden 25 %
    s0 = fake_run(tmp_path, "a1-s0", points(lambda i, p: 4), {"train.method": "a1", "train.seed": 0})
    s1 = fake_run(tmp_path, "a1-s1", points(lambda i, p: 2), {"train.method": "a1", "train.seed": 1})
    g = fake_run(tmp_path, "golden", points(lambda i, p: 1), {"train.method": "golden"})
    cmp = compare_methods([s0, s1, g], resamples=200)
    assert [(m.label, m.seeds) for m in cmp.methods] == [("a1", (0, 1)), ("golden", (0,))]
    d = result(cmp, "held-out", "coder/pass@1").delta
    assert (d.after, d.before, d.delta, d.problems) == pytest.approx((0.75, 0.25, 0.5, 9))


def test_validity_is_pooled_and_mul_is_the_product_of_the_means(tmp_path: Path) -> None:
    # held-out problems: a1 writes 4 tests, valid 4 on the first, 0 on the others; selfplay 1 everywhere
    first = next(p for p in IDS if p not in TRAIN)
    a = fake_run(tmp_path, "a1", points(lambda i, p: 2, lambda i, p: 4 if p == first else 0,
                                        lambda i, p: 4 if p == first else 0), {"train.method": "a1"})  # fmt: skip
    b = fake_run(tmp_path, "selfplay", points(lambda i, p: 2, lambda i, p: 1, lambda i, p: 1),
                 {"train.method": "selfplay"})  # fmt: skip
    cmp = compare_methods([a, b], resamples=200)
    validity = result(cmp, "held-out", "tester/validity").delta
    assert (validity.after, validity.before) == pytest.approx((4 / 36, 9 / 36))
    mul = result(cmp, "held-out", "tester/Mul").delta
    # pass@4 = mean(valid / 4), mut@4 = mean(killed / 4): a1 (1/9)(1/9), selfplay (1/4)(1/4)
    assert (mul.after, mul.before) == pytest.approx((1 / 81, 1 / 16))
    assert (mul.improved, mul.worsened) == (1, 8)


def test_a_variant_of_a1_is_its_own_method(tmp_path: Path) -> None:
    same = points(lambda i, p: 2)
    plain = fake_run(tmp_path, "a1", same, {"train.method": "a1"})
    variant = fake_run(tmp_path, "a1-alpha1", same, {"train.method": "a1", "reward.alpha": 1.0})
    cmp = compare_methods([plain, variant], resamples=100)
    assert [m.label for m in cmp.methods] == ["a1 reward.alpha=0.5", "a1 reward.alpha=1.0"]


def test_golden_has_no_tester_rows(tmp_path: Path) -> None:
    a = fake_run(tmp_path, "a1", points(lambda i, p: 2), {"train.method": "a1"})
    code_only = {step: (code, []) for step, (code, _) in points(lambda i, p: 1).items()}
    g = fake_run(tmp_path, "golden", code_only, {"train.method": "golden"})
    cmp = compare_methods([a, g], resamples=100)
    assert result(cmp, "training", "coder/pass@1").delta is not None
    r = result(cmp, "training", "tester/validity")
    assert r.delta is None and r.reason == "golden has no tester evaluation"


@pytest.mark.parametrize("field", ["eval.seed", "eval.n", "eval.data"])
def test_runs_evaluated_differently_are_refused_naming_the_field(
    tmp_path: Path, field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    other = {"eval.seed": 7, "eval.n": 8, "eval.data": "demo:easy-heldout"}[field]
    a = fake_run(tmp_path, "a1", points(lambda i, p: 2), {"train.method": "a1"})
    b = fake_run(tmp_path, "golden", points(lambda i, p: 2), {"train.method": "golden", field: other})
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{field} is" in err and "codea1: error:" in err


def test_the_command_prints_both_splits_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = fake_run(tmp_path, "a1", points(lambda i, p: 3), {"train.method": "a1"})
    b = fake_run(tmp_path, "golden", points(lambda i, p: 1), {"train.method": "golden"})
    out_json = tmp_path / "cmp.json"
    assert main(["compare", str(a), str(b), "--resamples", "300", "--output", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "training problems (12)" in out and "held-out problems (9)" in out
    assert "a1 vs golden  coder/pass@1" in out and "+50.0" in out and "[+50.0, +50.0]" in out
    saved = json.loads(out_json.read_text())
    assert saved["step"] == 8 and saved["pairs"][0]["result"]["delta"] == pytest.approx(50.0)


def test_two_scripted_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = []
    for method in ("a1", "selfplay"):
        run = tmp_path / method
        args = [
            "train", *SCRIPTED_RUN, "--steps", "1", "--method", method, "--run-dir", str(run),
            "--set", "data.train=demo:easy-train", "--set", "eval.data=demo:easy", "--set", "eval.every=1",
            "--set", "eval.limit=14", "--set", "eval.n=2",
            "--set", "eval.tests=2", "--set", "eval.max_mutants=3",
        ]  # fmt: skip
        assert main(args) == 0
        runs.append(str(run))
    capsys.readouterr()
    assert main(["compare", *runs, "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert "codea1 compare: step 1, eval.data=demo:easy" in out
    assert (
        "training problems (12)" in out and "held-out problems (2)" in out
    )  # demo:easy lists training first
    for metric in ("coder/pass@1", "tester/validity", "tester/pass@2", "tester/mut@2", "tester/Mul"):
        assert metric in out
    assert main(["report", *runs, "--output", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "evaluation_coder_pass_1.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("one method", "one method (a1)"),
        ("not a run", "not a run directory"),
        ("missing step", "--step 4: "),
    ],
)
def test_what_cannot_be_compared_is_one_line(
    tmp_path: Path, case: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    a = fake_run(tmp_path, "a1", points(lambda i, p: 2), {"train.method": "a1"})
    other = {"train.method": "a1", "train.seed": 1} if case == "one method" else {"train.method": "golden"}
    b = fake_run(tmp_path, "b", points(lambda i, p: 2), other)
    args = ["compare", str(a), str(b if case != "not a run" else tmp_path / "nowhere")]
    assert main(args + (["--step", "4"] if case == "missing step" else [])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
