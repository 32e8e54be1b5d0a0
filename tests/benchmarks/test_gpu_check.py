"""``benchmarks/gpu_check.py`` runs every check end to end on the CPU with a tiny model
(``--tiny --device cpu``), reports a failed check without stopping the others, and refuses bad input
in one line."""

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
CHECKS = {
    "(a) Ray learner build, world size 1": "PASS",
    "(b) shared-prompt rows vs one row per sequence": "PASS",
    "(b) typical row": "PASS",
    "(b) worst row": "PASS",
    "(c) worst micro-batch memory vs the plan": "N/A",  # CUDA only: no allocator peak on a CPU
    "(d) weight sync: gather, cast, copy to CPU": "PASS",
    "(e) DCP save/load round trip": "PASS",
    "(f) caching allocator after train_step": "N/A",  # CUDA only
    "(g) adapters (LoRA) under FSDP2": "PASS",
    "rollout speed": "info",
    "update speed": "info",
    "total": "PASS",
}
PRESETS = ("paper-1.5b", "paper-1.5b-ray", "paper-3b", "paper-3b-ray", "paper-7b", "paper-7b-ray")


def _run(*args: str, out: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("OUT", None)
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )


def _verdicts(stdout: str) -> dict[str, str]:
    """Row name → verdict, from the markdown table."""
    rows = [line.split(" | ") for line in stdout.splitlines() if line.startswith("| ") and " | " in line]
    return {cells[0].removeprefix("| "): cells[1] for cells in rows if len(cells) >= 4}


def test_tiny_cpu_run_prints_every_check_and_none_fails(tmp_path: Path) -> None:
    done = _run("--tiny", "--device", "cpu", out=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = _verdicts(done.stdout)
    expected = CHECKS | {f"(c) {preset}": "N/A" for preset in PRESETS}
    assert {name: verdicts.get(name) for name in expected} == expected, done.stdout
    assert "FAIL" not in verdicts.values(), done.stdout
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    checks = result["checks"]
    assert sorted(checks) == sorted(["a", "b", "c", "d", "e", "f", "g", "rollout", "update"])
    a = checks["a"]["data"]
    assert a["backend"] == "gloo" and a["masters"] == "float32" and a["reference"] == "float32"
    assert a["grad_gap"] <= 1e-5 and a["loss_gap"] <= 1e-5 and a["loss"] != 0 and a["changed"] > 0.9
    b = checks["b"]["data"]
    assert b["typical"]["shared_shared"] and not b["worst"]["shared_shared"]  # the cap splits the worst row
    assert b["worst"]["shared_width"] <= 256 and b["typical"]["grad_gap"] <= 1e-4
    d = checks["d"]["data"]
    assert d["bytes"] > 0 and d["seconds"] >= 0
    assert {"weights.safetensors", "scheduler.pt", "dcp"} <= set(checks["e"]["data"]["files"])
    assert checks["g"]["data"]["changed"] and all(".coder." in n for n in checks["g"]["data"]["changed"])
    for preset in PRESETS:  # the passes ran: one micro-batch per role, prediction computed
        rows = checks["c"]["data"][preset]
        assert rows["coder"]["rows"] == 4 and rows["tester"]["rows"] == 3
        assert (
            rows["coder"]["predicted_gib"] > 0 and rows["coder"]["measured_gib"] is None
        )  # no peak on a CPU


def test_a_failing_check_is_one_fail_line_and_the_others_still_run() -> None:
    done = _run("--tiny", "--device", "cpu", "--only", "a,g", "--simulate-failure", "a")
    assert done.returncode == 1, done.stdout + done.stderr
    verdicts = _verdicts(done.stdout)
    assert verdicts["(a) Ray learner build, world size 1"] == "FAIL"
    assert verdicts["(g) adapters (LoRA) under FSDP2"] == "PASS" and verdicts["total"] == "FAIL"
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("| (a) "))
    assert "RuntimeError: simulated failure" in line
    assert "(b)" not in verdicts and "Traceback" in done.stderr


def test_bad_device_is_a_one_line_error() -> None:
    done = _run("--device", "tpu7")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--device must be" in done.stderr


def test_unknown_check_is_a_one_line_error() -> None:
    done = _run("--device", "cpu", "--only", "a,z")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "unknown: z" in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without CUDA")
def test_cuda_without_a_device_is_a_one_line_error() -> None:
    done = _run("--device", "cuda")
    assert (
        done.returncode == 2 and "torch sees no CUDA device" in done.stderr and "Traceback" not in done.stderr
    )
