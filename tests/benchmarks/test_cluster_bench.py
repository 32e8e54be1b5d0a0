"""``benchmarks/cluster_bench.py``: its table from hand-made timings, and one real 2-step run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.benchmark_scripts import load_benchmark
from tests.demo_model import require_demo_model

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "cluster_bench.py"


cb = load_benchmark("cluster_bench")


def _row(step: int, total: float, rollout: float) -> dict:
    return {"step": step, "time/step": total, "time/coder_rollout": rollout, "time/execution": 0.5}


def test_medians_skip_the_first_step_and_the_cli_lines_time_the_rest() -> None:
    rows = [_row(1, 9.0, 6.0), _row(2, 3.0, 1.0), _row(3, 5.0, 3.0), _row(4, 4.0, 2.0)]
    # step k's line is printed when step k ends; a checkpoint follows each step
    lines = {1: 40.0, 2: 44.0, 3: 50.0, 4: 55.0}
    out = cb.summarize(cb.RunTimes(wall=61.0, step_lines=lines, rows=rows))
    assert out["coder_rollout"] == 2.0 and out["execution"] == 0.5  # medians of steps 2-4
    assert out["step"] == 4.0 and out["step 1"] == 9.0
    assert out["start-up"] == 31.0  # step 1 began at 40 - 9
    assert out["between steps"] == 1.0  # gaps 44-40-3, 50-44-5, 55-50-4
    assert out["after the last step"] == 6.0 and out["wall"] == 61.0


def test_the_table_lists_phases_then_the_step_then_the_time_outside_it() -> None:
    local = {"coder_rollout": 1.0, "execution": 0.0, "step": 2.0, "step 1": 3.0}
    local |= {"start-up": 10.0, "between steps": 0.5, "after the last step": 1.0, "wall": 20.0}
    ray = {k: v * 2 for k, v in local.items()} | {"push_weights": 0.25}
    lines = cb.markdown_table(local, ray).splitlines()
    assert lines[0] == "| phase | local s | ray s | overhead s | ratio |"
    names = [line.split("|")[1].strip() for line in lines[2:]]
    assert names == [
        "coder_rollout", "push_weights", "execution", "**step**", "step 1",
        "start-up", "between steps", "after the last step", "**wall**",
    ]  # fmt: skip
    assert lines[2] == "| coder_rollout | 1.000 | 2.000 | +1.000 | 2.00 |"
    assert lines[3] == "| push_weights | 0.000 | 0.250 | +0.250 | - |"
    assert lines[-1] == "| **wall** | 20.000 | 40.000 | +20.000 | 2.00 |"


@pytest.mark.slow
def test_two_steps_on_both_backends_give_the_table() -> None:
    pytest.importorskip("ray", reason="the Ray backend needs the ray extra")
    require_demo_model()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    args = ["--steps", "2", "--num-cpus", "2", "--set", "coder.sampling.max_new_tokens=16"]
    args += ["--set", "tester.sampling.max_new_tokens=16", "--set", "tracking.tensorboard=false"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split("|")[1].strip(): line for line in done.stdout.splitlines() if line.startswith("| ")}
    assert {"coder_rollout", "update_coder", "push_weights", "**step**", "start-up", "**wall**"} <= set(rows)
    local, ray = (float(rows["**wall**"].split("|")[i]) for i in (2, 3))
    assert local > 0 and ray > 0
    assert "engine.backend=ray" in done.stderr and "cluster.learner_workers=2" in done.stderr
