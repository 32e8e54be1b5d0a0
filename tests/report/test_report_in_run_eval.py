"""The report reads a run's own evaluation points: series with 95 % bands, the latest-point table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from codea1.cli import main
from codea1.core.bootstrap import ratio_interval
from codea1.core.eval_estimators import estimator_for
from codea1.report.runs import load_run
from tests.report.fake_runs import code_record, fake_run, suite_record


def test_ratio_interval_brackets_the_ratio_and_is_deterministic() -> None:
    low, high = ratio_interval([1, 0, 1, 1], [1, 1, 1, 1])
    assert 0.0 <= low <= 0.75 <= high <= 1.0
    assert (low, high) == ratio_interval([1, 0, 1, 1], [1, 1, 1, 1])
    assert ratio_interval([2, 2], [2, 2]) == (1.0, 1.0)  # no spread, no width
    assert ratio_interval([0, 0], [0, 0]) == (0.0, 0.0)  # nothing written: 0, not a division error


def test_eval_points_become_banded_series_and_the_latest_table(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = [
        "train", "--preset", "tiny-cpu", "--engine", "scripted", "--progress", "plain", "--set", "tracking.tensorboard=false",
        "--steps", "2", "--run-dir", str(run), "--set", "eval.data=demo:train", "--set", "eval.limit=6",
        "--set", "eval.n=2", "--set", "eval.max_mutants=3",
    ]  # fmt: skip
    assert main(args) == 0
    data = load_run(run)
    passed = data.series["eval/coder/pass@1"]
    assert list(passed.steps) == [0, 2]
    assert passed.low is not None and passed.high is not None
    assert np.all(passed.low <= passed.values) and np.all(passed.values <= passed.high)
    assert data.series["eval/tester/validity"].low is not None
    assert data.series["eval/tester/mut@5"].low is not None
    assert data.series["eval/tester/line_cov"].low is None  # no per-problem estimator: drawn without a band
    table = data.eval_table
    assert table is not None and table.source == "eval.jsonl" and table.step == 2
    assert {"pass@1", "avg@1"} <= set(table.rows["coder"]) and "validity" in table.rows["tester"]
    assert table.baseline_step == 0 and table.deltas["coder"].problems == 6
    assert main(["report", str(run), "--output", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "evaluation.png").stat().st_size > 0


def test_a_zero_score_is_a_value_not_a_gap(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("preset: x\n")
    (tmp_path / "eval.jsonl").write_text(
        '{"step": 0, "eval/coder/pass@1": 0.0}\n{"step": 4, "eval/coder/pass@1": 12.5}\n'
    )
    series = load_run(tmp_path).series["eval/coder/pass@1"]
    assert list(series.values) == [0.0, 12.5]


def _point_with_rejected_asserts(tmp_path: Path) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    """A fake run of one point whose suites also had asserts that did not parse (``rejected``)."""
    ids = [f"p{i}" for i in range(6)]
    tests = [suite_record(p, v, v // 2, rejected=12) for p, v in zip(ids, [1, 2, 3, 4, 2, 3], strict=True)]
    code = [code_record(p, i % 4) for i, p in enumerate(ids)]
    return load_run(fake_run(tmp_path, "run", {0: (code, tests)})), code, tests


def test_the_validity_band_surrounds_the_plotted_validity(tmp_path: Path) -> None:
    # rejected asserts are not tests considered: they must not pull the band below its own point
    # (docs/img/2026-12-02-a1-easy/evaluation.png: 52 outside [20, 42])
    run, _, _ = _point_with_rejected_asserts(tmp_path)
    s = run.series["eval/tester/validity"]
    assert s.values[0] == pytest.approx(100 * 15 / 24)  # valid over considered, pooled
    assert s.low is not None and s.high is not None
    assert s.low[0] <= s.values[0] <= s.high[0]


def test_each_band_is_a_band_of_the_estimate_it_surrounds(tmp_path: Path) -> None:
    run, code, tests = _point_with_rejected_asserts(tmp_path)
    banded = [key for key, s in run.series.items() if s.low is not None]
    assert {"eval/coder/pass@1", "eval/tester/validity", "eval/tester/mut@4", "eval/tester/Mul"} <= set(
        banded
    )
    for key in banded:
        s = run.series[key]
        estimator = estimator_for(key)
        assert estimator is not None and s.low is not None and s.high is not None
        records = code if estimator.task == "code" else tests
        assert 100 * estimator.value(records) == pytest.approx(s.values[0]), key  # the plotted number itself
        assert s.low[0] <= s.values[0] <= s.high[0], key


def test_several_runs_get_one_evaluation_figure_per_metric(tmp_path: Path) -> None:
    def point(passed: int) -> dict[int, Any]:
        ids = [f"p{i}" for i in range(4)]
        return {s: ([code_record(p, passed if s else 1) for p in ids], [suite_record(p, 2, 1) for p in ids])
                for s in (0, 4)}  # fmt: skip

    a, b = (
        fake_run(tmp_path, "a1", point(3)),
        fake_run(tmp_path, "golden", point(2), {"train.method": "golden"}),
    )
    out = tmp_path / "report"
    assert main(["report", str(a), str(b), "--output", str(out)]) == 0
    names = {p.name for p in out.glob("evaluation*.png")}
    assert names == {f"evaluation_{m}.png" for m in ("coder_avg_1", "coder_pass_1", "tester_Mul", "tester_mut_4",
                                                     "tester_pass_4", "tester_validity")}  # fmt: skip
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "Evaluation during training: coder/pass@1" in page
    assert main(["report", str(a), "--output", str(tmp_path / "one")]) == 0  # one run: one grid of panels
    assert {p.name for p in (tmp_path / "one").glob("evaluation*.png")} == {"evaluation.png"}
