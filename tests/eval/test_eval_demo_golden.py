"""Problems without an evalplus harness (the demo set) are checked against their golden tests."""

from __future__ import annotations

import json
from pathlib import Path

from codea1.cli import main
from codea1.data.problems import load_problems
from codea1.eval.code_eval import with_golden_harness


def _samples(path: Path, solutions: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"id": i, "solution": s}) + "\n" for i, s in solutions.items()))
    return path


def test_golden_harness_binds_the_entry_point_and_keeps_a_real_harness() -> None:
    p = load_problems("demo:heldout")[0]
    h = with_golden_harness(p).harness
    assert h is not None and h.startswith("def check(candidate):")
    assert f"    {p.entry_point} = candidate" in h
    assert all(t.strip() in h for t in p.golden_tests)
    real = with_golden_harness(p).harness
    assert with_golden_harness(with_golden_harness(p)).harness == real


def test_demo_heldout_references_score_100_and_wrong_code_0(tmp_path: Path) -> None:
    problems = load_problems("demo:heldout")
    refs = _samples(tmp_path / "refs.jsonl", {p.id: p.reference for p in problems})
    out = tmp_path / "refs.json"
    args = ["eval", "code", "--data", "demo:heldout", "--cache-dir", str(tmp_path / "cache")]
    assert (
        main([*args, "--samples", str(refs), "--output", str(out), "--results-dir", str(tmp_path / "r1")])
        == 0
    )
    assert json.loads(out.read_text())["demo"]["pass@1"] == 100.0

    wrong = {p.id: f"def {p.entry_point}(*args, **kwargs):\n    return None\n" for p in problems}
    out2 = tmp_path / "wrong.json"
    bad = _samples(tmp_path / "wrong.jsonl", wrong)
    assert (
        main([*args, "--samples", str(bad), "--output", str(out2), "--results-dir", str(tmp_path / "r2")])
        == 0
    )
    assert json.loads(out2.read_text())["demo"]["pass@1"] == 0.0
