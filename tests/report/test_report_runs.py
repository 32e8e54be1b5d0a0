"""Reading run directories and assigning metric keys to figures (no plotting)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from codea1.report.figures import FIGURES, plan_figures
from codea1.report.html import render_page
from codea1.report.plots import smoothed
from codea1.report.runs import ReportError, load_run, load_runs, unique_names


def write_metrics(run: Path, lines: list[str]) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def test_bad_lines_are_skipped_and_named(tmp_path: Path) -> None:
    run = tmp_path / "r"
    write_metrics(
        run,
        [
            '{"step": 1, "coder/reward_mean": 0.5}',
            '{"step": 2, "coder/reward_mean": 0.6',  # corrupt in the middle
            '["not", "an", "object"]',
            '{"coder/reward_mean": 0.1}',  # no step
            '{"step": 3, "coder/reward_mean": 0.7}',
            "",
            '{"step": 4, "coder/rew',  # torn last line
        ],
    )
    data = load_run(run)
    assert data.series["coder/reward_mean"].steps.tolist() == [1, 3]
    assert data.series["coder/reward_mean"].values.tolist() == [0.5, 0.7]
    assert data.n_rows == 2 and data.last_step == 3
    text = "\n".join(data.warnings)
    assert "line 2 is not valid JSON" in text and "line 7 is incomplete" in text
    assert "line 3 has no integer 'step'" in text and "line 4 has no integer 'step'" in text
    assert "no config.yaml" in text


def test_values_nulls_nesting_and_repeated_steps(tmp_path: Path) -> None:
    run = tmp_path / "r"
    write_metrics(
        run,
        [
            json.dumps(
                {"step": 1, "exec/history_pass_rate": None, "tester": {"invalid": {"dup": 2}}, "note": "x"}
            ),
            json.dumps({"step": 2, "exec/history_pass_rate": 0.25, "flag": True}),
            json.dumps({"step": 2, "exec/history_pass_rate": 0.5}),  # resumed run: the later line wins
        ],
    )
    data = load_run(run)
    history = data.series["exec/history_pass_rate"]
    assert history.steps.tolist() == [1, 2] and math.isnan(history.values[0]) and history.values[1] == 0.5
    assert history.last_finite() == 0.5
    assert data.series["tester/invalid/dup"].values.tolist() == [2.0]
    assert data.series["flag"].values.tolist() == [1.0]
    assert "note" not in data.series
    assert any("logged more than once" in w for w in data.warnings)


def test_newest_eval_file_and_eval_series(tmp_path: Path) -> None:
    run = tmp_path / "r"
    write_metrics(run, ['{"step": 1}'])
    (run / "eval").mkdir()
    (run / "eval" / "step_000002.json").write_text(json.dumps({"he": {"pass@1": 0.3}}), encoding="utf-8")
    (run / "eval" / "step_000010.json").write_text(json.dumps({"he": {"pass@1": 0.4}}), encoding="utf-8")
    (run / "eval" / "broken.json").write_text("{", encoding="utf-8")
    data = load_run(run)
    assert data.eval_table is not None and data.eval_table.source == "step_000010.json"
    assert data.eval_table.step == 10 and data.eval_table.n_files == 2
    assert data.series["eval/he/pass@1"].values.tolist() == [0.3, 0.4]
    assert any("broken.json is unreadable" in w for w in data.warnings)
    # a file without a step counts as final, whatever its modification time
    final = run / "eval" / "final.json"
    final.write_text(json.dumps({"step_label": "end", "he": {"pass@1": 0.45}}), encoding="utf-8")
    os.utime(final, (0, 0))
    assert load_run(run).eval_table.source == "final.json"  # type: ignore[union-attr]


def test_every_benchmark_file_of_the_newest_step_joins_the_table(tmp_path: Path) -> None:
    run = tmp_path / "r"
    write_metrics(run, ['{"step": 1}'])
    (run / "eval").mkdir()
    for step, he, heldout in ((0, 46.3, 50.0), (8, 47.0, 53.1)):
        he_row = {"humanevalplus": {"pass@1": he, "problems": 164}, "results": "x.jsonl"}
        (run / "eval" / f"step_{step}-humanevalplus.json").write_text(json.dumps(he_row), encoding="utf-8")
        demo_row = {"demo": {"pass@1": heldout, "problems": 16}}
        (run / "eval" / f"step_{step}-demo-heldout2.json").write_text(json.dumps(demo_row), encoding="utf-8")
    data = load_run(run)
    table = data.eval_table
    assert table is not None and table.step == 8 and table.n_files == 4
    assert table.source == "step_8-demo-heldout2.json, step_8-humanevalplus.json"
    assert table.rows == {
        "demo": {"pass@1": 53.1, "problems": 16},
        "humanevalplus": {"pass@1": 47.0, "problems": 164},
    }
    assert data.series["eval/demo/pass@1"].steps.tolist() == [0, 8]  # the step word wins over "heldout2"
    assert "eval/demo/problems" not in data.series  # counts are tabled, not plotted


def _results(path: Path, correct: dict[str, list[bool]]) -> str:
    lines = [json.dumps({"run_key": {"model": "m"}})]
    lines += [json.dumps({"id": pid, "source": "he", "correct": c}) for pid, c in correct.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_newest_evaluation_is_compared_with_the_earliest_when_results_are_named(tmp_path: Path) -> None:
    run = tmp_path / "r"
    write_metrics(run, ['{"step": 1}'])
    (run / "eval").mkdir()
    before = _results(tmp_path / "b.jsonl", {"p1": [False, False], "p2": [True, False], "p3": [True, True]})
    after = _results(tmp_path / "a.jsonl", {"p1": [True, True], "p2": [True, False], "p3": [True, True]})
    for step, score, results in ((0, 50.0, before), (6, 100 * 5 / 6, after)):
        row = {"he": {"pass@1": score}, "results": results}
        (run / "eval" / f"step_{step}-he.json").write_text(json.dumps(row), encoding="utf-8")
    table = load_run(run).eval_table
    assert table is not None and table.baseline_step == 0 and set(table.deltas) == {"he"}
    d = table.deltas["he"]
    assert (d.before, d.after, d.delta, d.improved, d.worsened) == (0.5, 5 / 6, pytest.approx(1 / 3), 1, 0)
    page = render_page([load_run(run)], [], [], generated_at="now")
    assert "95 % CI of Δ" in page and "+33.3" in page

    # different problem sets are not paired: a warning, no delta
    _results(tmp_path / "a.jsonl", {"p1": [True], "p9": [True]})
    data = load_run(run)
    assert data.eval_table is not None and not data.eval_table.deltas
    assert any("not compared" in w and "different problems" in w for w in data.warnings)


def test_missing_and_non_run_directories_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="does not exist"):
        load_run(tmp_path / "missing")
    with pytest.raises(ReportError, match="not a training run directory"):
        load_run(tmp_path)
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(ReportError, match="not a directory"):
        load_run(tmp_path / "file")
    with pytest.raises(ReportError, match="no run directory"):
        load_runs([])


def test_config_only_run_is_reported_with_a_warning(tmp_path: Path) -> None:
    run = tmp_path / "fresh"
    run.mkdir()
    (run / "config.yaml").write_text("reward:\n  alpha: 0.5\n", encoding="utf-8")
    data = load_run(run)
    assert data.series == {} and data.config == {"reward": {"alpha": 0.5}}
    assert any("no metrics.jsonl" in w for w in data.warnings)


def test_unique_names_add_parents_only_when_needed(tmp_path: Path) -> None:
    assert unique_names([tmp_path / "a" / "run", tmp_path / "b" / "run"]) == ["a/run", "b/run"]
    assert unique_names([tmp_path / "a" / "x", tmp_path / "b" / "y"]) == ["x", "y"]


def test_every_key_is_plotted_once_and_missing_figures_are_listed() -> None:
    keys = {
        "coder/reward_mean",
        "exec/code_valid_rate",
        "tester/val_mean",
        "tester/invalid/parse_error",
        "time/sandbox",
        "time/step",
        "coder/entropy",
        "lr",
    }
    planned, missing = plan_figures({"a": keys, "b": {"coder/reward_mean"}})
    drawn = [k for fig in planned for k in fig.keys]
    assert sorted(drawn) == sorted(keys)  # each key exactly once
    by_name = {fig.spec.name: fig for fig in planned}
    assert by_name["coder_reward"].panel_keys == (("coder/reward_mean",), ("exec/code_valid_rate",))
    assert (
        by_name["step_time"].panel_keys == (("time/sandbox",),)
        and by_name["step_time"].total_key == "time/step"
    )
    assert by_name["other_coder"].keys == ["coder/entropy"] and by_name["other_misc"].keys == ["lr"]
    assert by_name["tester_reward"].runs_without_data == ("b",)
    assert {spec.name for spec in missing} == {
        "pass_rates",
        "mistake_book",
        "timeouts",
        "generation",
        "grpo_groups",
        "coder_losses",
        "tester_losses",
        "evaluation",
    }
    assert [fig.spec.name for fig in planned][:3] == ["coder_reward", "tester_reward", "invalid_tests"]


def test_total_time_alone_is_not_lost() -> None:
    planned, missing = plan_figures({"a": {"time/step"}})
    assert "step_time" in {spec.name for spec in missing}
    assert [fig.keys for fig in planned] == [["time/step"]]


def test_figure_names_are_unique() -> None:
    assert len({spec.name for spec in FIGURES}) == len(FIGURES)


def test_smoothing_is_a_trailing_mean_that_skips_nans() -> None:
    values = np.array([1.0, np.nan, 3.0, 5.0])
    assert smoothed(values, 1) is values
    out = smoothed(values, 2)
    assert out.tolist() == [1.0, 1.0, 3.0, 4.0]
    assert np.isnan(smoothed(np.array([np.nan, 2.0]), 1)[0])
