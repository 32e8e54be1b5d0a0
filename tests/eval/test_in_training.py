"""Evaluation inside a run: its points, what they log, resume without resampling, and parity with
``codea1 eval code`` on the same engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codea1.cli import main
from codea1.config import EvalConfig
from codea1.data.problems import load_problems
from codea1.engine.scripted import ScriptedPolicy
from codea1.eval.in_training import EVAL_DIR, InRunEvaluator, due
from codea1.tracking import read_eval_points
from tests.scripted_run import SCRIPTED_RUN

FAST = SCRIPTED_RUN


def _reference_answer(prompt: str, j: int) -> str:
    """The held-out problem's own reference for even samples, a wrong function for odd ones."""
    for p in HELDOUT:
        if p.question.strip()[:80] in prompt:
            body = p.reference if j % 2 == 0 else f"def {p.entry_point}(*args):\n    return None\n"
            return f"```python\n{body}\n```"
    return "```python\npass\n```"


HELDOUT = load_problems("demo:heldout", limit=4)


def test_points_are_step_zero_every_k_and_the_last() -> None:
    assert [s for s in range(0, 8) if due(s, every=3, last_step=7)] == [0, 3, 6, 7]
    assert [s for s in range(0, 8) if due(s, every=0, last_step=7)] == [0, 7]


def test_coder_point_is_the_pass_rate_and_resumes_without_sampling(tmp_path: Path) -> None:
    cfg = EvalConfig(data="demo:heldout", limit=4, n=2, tester=False)
    evaluator = InRunEvaluator(cfg, tmp_path, "base-model", "base-model")
    policy = ScriptedPolicy(_reference_answer)
    first = evaluator.coder(0, policy)
    assert first["eval/coder/pass@1"] == pytest.approx(50.0)  # one of the two samples is right
    assert first["eval/coder/avg@1"] == pytest.approx(100.0)  # avg@1 reads sample 0: the right one
    calls = policy.calls
    again = evaluator.coder(0, policy)  # the point was computed: read back, not sampled
    assert again == first and policy.calls == calls
    files = sorted(p.name for p in (tmp_path / EVAL_DIR / "step_000000").iterdir())
    assert len(files) == 1 and files[0].startswith("code-base-model-")
    rows = (tmp_path / EVAL_DIR / "step_000000" / files[0]).read_text().splitlines()
    assert "run_key" in json.loads(rows[0]) and len(rows) == 1 + 4  # header + one record per problem


def test_a_run_logs_every_point_and_a_resumed_run_catches_up(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = [
        "train", *FAST, "--steps", "3", "--run-dir", str(run), "--set", "train.save_every=1",
        "--set", "eval.data=demo:heldout", "--set", "eval.limit=3", "--set", "eval.n=2",
        "--set", "eval.every=2", "--set", "eval.max_mutants=3",
    ]  # fmt: skip
    assert main(args) == 0
    points = read_eval_points(run)
    assert sorted(points) == [0, 2, 3]
    for row in points.values():
        assert {"eval/coder/pass@1", "eval/tester/validity", "eval/tester/mut@5", "eval/time_s"} <= set(row)
    # a crash after step 3's checkpoint and before its evaluation: the resumed run evaluates it
    lines = (run / "eval.jsonl").read_text().splitlines()
    (run / "eval.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    assert main(["train", "--resume", str(run), "--progress", "plain"]) == 0
    again = read_eval_points(run)
    assert sorted(again) == [0, 2, 3]
    assert {k: v for k, v in again[3].items() if k != "eval/time_s"} == {
        k: v for k, v in points[3].items() if k != "eval/time_s"
    }


def test_bad_eval_data_is_one_line_before_the_run_directory_exists(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    args = ["train", *FAST, "--steps", "1", "--run-dir", str(run), "--set", "eval.data=no-such.jsonl"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "eval.data='no-such.jsonl'" in err and "Traceback" not in err
    assert not run.exists()


@pytest.mark.slow
def test_step_zero_equals_eval_code_sample_for_sample(tmp_path: Path) -> None:
    """The same engine (transformers) and settings: the run's step-0 point and ``codea1 eval code``
    on the base model draw the same completions and give the same verdicts."""
    from tests.tiny_model import make_tiny_model

    model = make_tiny_model(tmp_path / "model")
    sampling = [
        "--n",
        "2",
        "--max-new-tokens",
        "24",
        "--temperature",
        "0.7",
        "--top-p",
        "0.95",
        "--seed",
        "3",
    ]
    run = tmp_path / "run"
    args = [
        "train", "--preset", "tiny-cpu", *FAST[4:], "--run-dir", str(run), "--steps", "1", "--set", "engine.kind=transformers",
        "--set", f"engine.coder_model={model}", "--set", "engine.rollout=transformers",
        "--set", "train.method=golden", "--set", "eval.data=demo:heldout", "--set", "eval.limit=3",
        "--set", "eval.n=2", "--set", "eval.max_new_tokens=24", "--set", "eval.seed=3",
        "--set", "coder.sampling.max_new_tokens=8", "--set", "data.problems_per_step=1",
    ]  # fmt: skip
    assert main(args) == 0
    assert main(["eval", "code", "--data", "demo:heldout", "--limit", "3", "--model", str(model), *sampling,
                 "--results-dir", str(tmp_path / "eval")]) == 0  # fmt: skip

    def records(directory: Path) -> list[dict]:
        (path,) = directory.glob("code-*.jsonl")
        return [json.loads(line) for line in path.read_text().splitlines()[1:]]

    in_run, alone = records(run / EVAL_DIR / "step_000000"), records(tmp_path / "eval")
    assert [r["completions"] for r in in_run] == [r["completions"] for r in alone]
    assert [r["status"] for r in in_run] == [r["status"] for r in alone]
