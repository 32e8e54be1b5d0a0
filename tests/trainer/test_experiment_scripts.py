"""The experiment scripts under scripts/ run end to end on the scripted engine (train + report)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.scripted_run import SCRIPTED_RUN

REPO = Path(__file__).resolve().parents[2]
FAST = SCRIPTED_RUN


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # this venv's codea1
    env.pop("CODEA1_QWEN_MODEL", None)
    env.update(extra)
    return env


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bash") is None, reason="the scripts are bash"),
]


def test_method_comparison_trains_every_method_compares_and_resumes(tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    env = _env(EXP_DIR=str(exp), STEPS="1", EVERY="1", EVAL_N="2")
    args = [
        *FAST,
        "--set",
        "eval.max_mutants=3",
        "--set",
        "eval.limit=14",
    ]  # 12 training, 2 held-out problems
    command = ["bash", str(REPO / "scripts" / "method_comparison.sh"), *args]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    for method in ("a1", "golden", "selfplay"):
        run = exp / f"{method}-s0"
        assert (run / "checkpoints" / "step_000001" / "state.json").is_file()
        config = yaml.safe_load((run / "config.yaml").read_text())
        assert (
            config["train"]["method"] == method and config["coder"]["optim"]["lr"] == 2e-5
        )  # the LOG's protocol
        assert (config["eval"]["data"], config["eval"]["seed"], config["eval"]["n"]) == ("demo:easy", 1000, 2)
    table = (exp / "comparison.txt").read_text()
    assert "training problems (12)" in table and "held-out problems (2)" in table and "a1 vs golden" in table
    assert json.loads((exp / "comparison.json").read_text())["step"] == 1
    page = (exp / "report" / "index.html").read_text()
    assert all(name in page for name in ("a1-s0", "golden-s0", "selfplay-s0"))
    # rerunning resumes each run, and a finished one is left as it is
    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stdout.count("is finished") == 3, again.stderr[-2000:]


def test_method_comparison_refuses_a_malformed_runs_entry(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "method_comparison.sh")],
        cwd=tmp_path, env=_env(EXP_DIR=str(tmp_path / "e"), RUNS="a1"), capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "METHOD:SEED" in done.stderr


def test_alpha_sweep_runs_one_directory_per_alpha(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "alpha_sweep.sh"), "--steps", "1", *FAST],
        cwd=tmp_path, env=_env(SWEEP_DIR=str(sweep), ALPHAS="0 1"), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    for alpha in ("0", "1"):
        config = yaml.safe_load((sweep / f"alpha-{alpha}" / "config.yaml").read_text())
        assert config["reward"]["alpha"] == float(alpha)
