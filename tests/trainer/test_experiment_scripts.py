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


def test_method_comparison_trains_every_method_and_reports(tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    env = _env(EXP_DIR=str(exp), STEPS="2", TRAIN_ONLY="1", PRESET="tiny-cpu")
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "method_comparison.sh"), *FAST],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    for method in ("a1", "golden", "selfplay"):
        assert (exp / method / "checkpoints" / "step_000002" / "state.json").is_file()
        lines = (exp / method / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(line)["step"] for line in lines] == [1, 2]
    page = (exp / "report" / "index.html").read_text()
    assert all(name in page for name in ("a1", "golden", "selfplay"))
    # rerunning skips the trained runs instead of training them again
    again = subprocess.run(
        ["bash", str(REPO / "scripts" / "method_comparison.sh"), *FAST],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert again.returncode == 0 and again.stdout.count("already trained") == 3


def test_method_comparison_without_a_model_says_what_to_set(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "method_comparison.sh")],
        cwd=tmp_path, env=_env(EXP_DIR=str(tmp_path / "e")), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "CODEA1_QWEN_MODEL" in done.stderr


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
