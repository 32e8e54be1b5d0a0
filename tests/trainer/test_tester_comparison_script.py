"""scripts/tester_comparison.sh: it refuses malformed settings before anything runs, and on the
scripted engine (a tiny random model in place of every checkpoint at evaluation) it trains every
method and seed, evaluates every tester and coder on the held-out split, pairs the methods with
several files per side, and resumes."""

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
SCRIPT = REPO / "scripts" / "tester_comparison.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the scripts are bash")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # this venv's codea1
    env.update(extra)
    return env


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"METHODS": "a1"}, "expected LABEL=METHOD"),
        ({"METHODS": "x=a1 x=selfplay"}, "given twice"),
        ({"METHODS": "x=a1:reward.alpha=1:more"}, "expected LABEL=METHOD"),
        ({"SEEDS": "0 one"}, "'one' is not a seed"),
        ({"CODE_N": "0"}, "CODE_N and STEPS"),
    ],
)
def test_malformed_settings_are_refused_before_anything_runs(
    tmp_path: Path, settings: dict[str, str], message: str
) -> None:
    exp = tmp_path / "exp"
    done = subprocess.run(
        ["bash", str(SCRIPT)], cwd=tmp_path, env=_env(EXP_DIR=str(exp), **settings), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not exp.exists()


@pytest.mark.slow
def test_trains_evaluates_every_tester_alike_compares_and_resumes(tmp_path: Path) -> None:
    """Two of the variants, two seeds each, one step; a tiny random model evaluated in place of
    every checkpoint (EVAL_MODEL) on two held-out problems."""
    from tests.tiny_model import make_tiny_model

    model = make_tiny_model(tmp_path / "tiny")
    exp = tmp_path / "exp"
    env = _env(
        EXP_DIR=str(exp), METHODS="half=a1:tester.whitebox_share=0.5 kinds=a1:reward.mutation_kinds_weight=0.5",
        SEEDS="0 1", STEPS="1", EVERY="1", EVAL_N="2", CODE_N="1", EVAL_LIMIT="2", EVAL_MODEL=str(model),
        HELDOUT="demo:easy-heldout",
    )  # fmt: skip
    command = [
        "bash",
        str(SCRIPT),
        *SCRIPTED_RUN[2:],
        "--set",
        "eval.max_mutants=3",
        "--set",
        "eval.limit=14",
    ]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = {"half": "a1-tester.whitebox_share=0.5", "kinds": "a1-reward.mutation_kinds_weight=0.5"}
    for label, name in runs.items():
        for seed in (0, 1):
            config = yaml.safe_load((exp / f"{name}-s{seed}" / "config.yaml").read_text())
            assert config["train"]["seed"] == seed and config["coder"]["optim"]["lr"] == 2e-5  # the protocol
            assert config["tester"]["whitebox_share"] == (0.5 if label == "half" else 1.0)
            assert config["reward"]["mutation_kinds_weight"] == (0.5 if label == "kinds" else 0.0)
            for kind, key in (("tests", "mut@4"), ("code", "pass@1")):
                found = json.loads(
                    (exp / "heldout-eval" / f"{name}-s{seed}" / kind / "metrics.json").read_text()
                )
                assert found["demo"]["problems"] == 2 and key in found["demo"]
    compared = exp / "heldout-compare"
    for metric in ("killed", "valid", "pass"):  # both seeds on each side, averaged per problem
        meta = json.loads((compared / f"{metric}-kinds-vs-half.json").read_text())["comparison"]
        assert meta["metric"] == metric
        assert [runs["kinds"] in f for f in meta["after"]] == [True, True]
        assert [runs["half"] in f for f in meta["before"]] == [True, True]
    assert (compared / "killed-half-vs-base.json").is_file() and not (
        compared / "pass-half-vs-base.json"
    ).exists()
    table = (exp / "heldout-comparison.txt").read_text()
    assert (
        table.count("each problem averaged over a side's files") == 3 + 2 * 2
    )  # 3 metrics; 2 testers vs base
    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("is finished") == 4 and again.stdout.count(": done") == 9
