"""The end-of-run lines of ``codea1 train``: what changed from the first step to the last."""

from __future__ import annotations

from codea1.cli.train_summary import what_changed


def test_first_and_last_step_side_by_side() -> None:
    rows = [
        {"step": 1, "coder/reward_mean": 0.0625, "replay/book_size": 1.0, "tester/valid_tests_mean": 0.25},
        {"step": 2, "coder/reward_mean": 0.5},
        {"step": 3, "coder/reward_mean": 0.328, "replay/book_size": 6.0, "tester/valid_tests_mean": 1.5},
    ]
    lines = what_changed(rows)
    assert lines[0].startswith("what changed, step 1 -> 3")
    body = "\n".join(lines[1:])
    assert "coder reward (mean R_C)" in body and "0.062 -> 0.328" in body
    assert "Mistake Book tests" in body and "1 -> 6" in body
    assert "valid tests per suite" in body and "0.25 -> 1.50" in body
    assert "tester reward" not in body  # in neither row: no line


def test_nothing_for_a_run_of_one_step() -> None:
    assert what_changed([]) == [] and what_changed([{"step": 1, "coder/reward_mean": 0.5}]) == []
