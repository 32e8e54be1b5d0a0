"""The report reads a run's own evaluation points: series with 95 % bands, the latest-point table."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from codea1.cli import main
from codea1.core.bootstrap import ratio_interval
from codea1.report.runs import load_run


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
    assert data.series["eval/tester/mut@5"].low is None  # drawn without a band
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
