"""``benchmarks/gpu_check.py`` runs end to end on the CPU with a tiny model (``--tiny --device cpu``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
ROWS = (
    "rollout tokens/s",
    "rollout peak memory GiB",
    "log-prob tokens/s (no grad)",
    "update tokens/s",
    "update peak memory GiB",
    "weights changed by one update",
    "FSDP2 world size 1 (gloo)",
    "FSDP2 gradient gap",
)
CHECKS = (
    "FSDP2 loss and grad norm finite",
    "FSDP2 step changed the weights",
    "FSDP2 loss = one-process loss",
    "FSDP2 gradients = one-process gradients",
)


def _run(*args: str, out: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("OUT", None)
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )


def test_tiny_cpu_run_prints_every_row_and_passes_its_checks(tmp_path: Path) -> None:
    done = _run("--tiny", "--device", "cpu", out=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    cells = {line.split(" | ")[0].removeprefix("| "): line for line in done.stdout.splitlines()}
    for row in ROWS:
        assert row in cells, row
    for check in CHECKS:
        assert f"| {check} | pass |" in cells[check]
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["fsdp"]["backend"] == "gloo" and result["checks"] == dict.fromkeys(CHECKS, True)
    assert result["rollout"]["new_tokens"] > 0 and result["update"]["tokens_per_s"] > 0
    assert 0 < result["update"]["weights_changed"] <= 1  # fp32 at lr 1e-6: the step moves weights
    assert result["fsdp"]["grad_gap"] <= 1e-5


def test_bad_device_is_a_one_line_error() -> None:
    done = _run("--device", "tpu7")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--device must be" in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without CUDA")
def test_cuda_without_a_device_is_a_one_line_error() -> None:
    done = _run("--device", "cuda")
    assert (
        done.returncode == 2 and "torch sees no CUDA device" in done.stderr and "Traceback" not in done.stderr
    )
