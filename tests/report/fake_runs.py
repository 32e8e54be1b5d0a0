"""Fake training run directories for the report and ``codea1 compare`` tests: a real ``config.yaml``
(``dump_config`` of a checked ``RunConfig``), per-problem evaluation files written by the results
writer (``ResultStore``) in ``eval/step_NNNNNN/``, and ``eval.jsonl`` rows computed from them by the
evaluation's own summaries, in the row format of ``Tracker.log_eval``. No model, no sandbox."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from codea1.config import RunConfig, config_from_dict, dump_config
from codea1.eval.code_eval import summarize_code
from codea1.eval.in_training import EVAL_DIR
from codea1.eval.suite_eval import summarize_tests
from codea1.results_file import ResultStore
from codea1.tracking import EVAL_FILE, step_file_name

K = 4
"""Tests per suite of the fake tester records (``eval.tests``)."""


def fake_config(values: Mapping[str, Any] | None = None) -> RunConfig:
    """The default configuration with dotted ``values`` set, checked as a run's would be."""
    raw = RunConfig().to_dict()
    base = {
        "eval.data": "demo:easy",
        "eval.n": 4,
        "eval.tests": K,
        "eval.seed": 1000,
        "data.train": "demo:easy-train",
    }
    if (values or {}).get("train.method") == "selfplay":
        base["tester.view"] = "blackbox"  # the baseline's own view (the configuration insists)
    for key, value in {**base, **(values or {})}.items():
        node = raw
        *path, last = key.split(".")
        for part in path:
            node = node[part]
        node[last] = value
    return config_from_dict(raw, "fake")


def code_record(pid: str, passed: int, n: int = 4) -> dict[str, Any]:
    """An ``eval code`` record of ``passed`` correct samples out of ``n``."""
    return {"id": pid, "source": "demo", "n": n, "correct": [i < passed for i in range(n)]}


def suite_record(pid: str, valid: int, killed: int, *, considered: int = K, rejected: int = 0,
                 live: int = 4) -> dict[str, Any]:  # fmt: skip
    """An ``eval tests`` record: ``valid`` of ``considered`` tests valid, ``killed`` of ``live`` mutants."""
    return {
        "id": pid, "source": "demo", "k": K, "tests": [{"call": f"t{i}"} for i in range(considered)],
        "rejected": rejected, "oracle": ["valid"] * valid + ["wrong"] * (considered - valid), "valid": valid,
        "mutants": live, "equivalent": 0, "killed": killed, "mutation_score": killed / live if live else None,
        "line_coverage": 100.0, "branch_coverage": 100.0, "wrong_codes": 0, "detected": 0,
    }  # fmt: skip


def write_point(
    run: Path, step: int, code: Sequence[dict[str, Any]], tests: Sequence[dict[str, Any]] = ()
) -> None:
    """One evaluation point: its results files and its ``eval.jsonl`` row (the summaries' numbers)."""
    directory = run / EVAL_DIR / step_file_name(step)
    ResultStore(directory, "code", {"model": "fake", "n": len(code[0]["correct"])}).add(
        [dict(r) for r in code]
    )
    row: dict[str, Any] = {"step": step}
    summary = summarize_code(code, [1])["demo"]
    row.update({f"eval/coder/{k}": v for k, v in summary.items() if k != "problems"})
    if tests:
        ResultStore(directory, "tests", {"model": "fake", "k": K}).add([dict(r) for r in tests])
        summary = summarize_tests(tests, K)["demo"]
        keep = ("validity", f"pass@{K}", f"mut@{K}", "Mul")
        row.update({f"eval/tester/{k}": summary[k] for k in keep})
    with open(run / EVAL_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")


def fake_run(
    root: Path,
    name: str,
    points: Mapping[int, tuple[Sequence[dict[str, Any]], Sequence[dict[str, Any]]]],
    values: Mapping[str, Any] | None = None,
) -> Path:
    """A run directory ``root/name`` with ``config.yaml`` and the given evaluation points
    (step -> (code records, tests records))."""
    run = root / name
    run.mkdir(parents=True)
    dump_config(fake_config(values), run / "config.yaml")
    for step, (code, tests) in sorted(points.items()):
        write_point(run, step, code, tests)
    return run
