"""``benchmarks/cluster_memory.py --check``: every shipped GPU preset's plan passes vLLM's start-up
rule where it is meant to run, layouts it is not meant for say so, and a bad plan fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codea1.config import preset_names
from tests.benchmarks.benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "cluster_memory.py"

cm = load_benchmark("cluster_memory")


def test_the_check_passes_for_every_shipped_gpu_preset() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| paper-")]
    presets = {row.split(" | ")[0].strip("| ") for row in rows}
    assert presets == {n for n in preset_names() if n.startswith("paper-")}
    assert not [row for row in rows if "| FAIL" in row]
    shipped = [row for row in rows if "-ray | ray split |" in row and "paper-7b" not in row]
    shipped += [row for row in rows if row.startswith("| paper-7b-ray | ray colocate |")]
    assert len(shipped) == 2 * 2 * 4 + 2 * 2 and all(row.endswith("| PASS |") for row in shipped)
    local_7b = [row for row in rows if row.startswith("| paper-7b | local")]
    assert len(local_7b) == 2 and all(
        "does not fit" in r and "use paper-7b-ray (8 GPUs)" in r for r in local_7b
    )
    assert "| paper-1.5b | local, 1 GPU | 141 GB (139 GiB) | 2 learners, 2 engines |" in done.stdout
    # the reference's node: every -ray preset, both roles' GPUs, PASS with 5 % of the GPU free
    node = [row for row in rows if "| reference node: 8 × 80 GB, 4 + 4 per role, colocate | 80 GB" in row]
    assert len(node) == 3 * 2 and all(row.endswith("| PASS |") for row in node)
    for row in node:
        peak = float(row.split(" | ")[-2])
        assert 79.0 - peak >= 0.05 * 79.0, row
    seven = [row for row in node if row.startswith("| paper-7b-ray")]
    assert all("| 0.778, 44.0 (67), 256 |" in row for row in seven)  # the preset's KV cache, 256 sequences


def test_a_kv_cache_that_overflows_fails_the_check(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "--check",
        "--preset",
        "paper-1.5b-ray",
        "--gpu-gib",
        "79",
        "--set",
        "engine.vllm_kv_cache_gib=74",
    ]
    assert cm.main(argv) == 1
    out = capsys.readouterr().out
    assert "| paper-1.5b-ray | ray split | 79 GiB | coder replica |" in out
    assert "FAIL: coder replica: vLLM refuses to start" in out


def test_a_shipped_layout_with_no_plan_fails_and_another_layout_only_does_not_fit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--check", "--preset", "paper-3b-ray", "--gpu-gib", "50", "--set", "engine.vllm_kv_cache_gib=0"]
    assert cm.main(argv) == 0  # split fits; colocate's learner phase does not, which is no failure
    out = capsys.readouterr().out
    assert "does not fit: 48.5 GiB while the engines sleep" in out and "use placement split" in out
    too_small = [
        "--check",
        "--preset",
        "paper-7b-ray",
        "--gpu-gib",
        "20",
        "--set",
        "engine.vllm_kv_cache_gib=0",
    ]
    assert cm.main(too_small) == 1
    assert "| ray split | 20 GiB | coder replica | 0.5 | – | – |" in capsys.readouterr().out


def test_the_check_plans_each_ray_presets_host_memory_on_the_stated_node(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cm.main(["--check"]) == 0
    out = capsys.readouterr().out
    assert "1024 GiB of host memory (assumed)" in out and "3 host rows, 0 FAIL" in out
    host = {
        row.split(" | ")[0].strip("| "): row.split(" | ")
        for row in out.splitlines()
        if row.startswith("| paper-") and "GiB host |" in row
    }
    assert sorted(host) == sorted(n for n in preset_names() if n.startswith("paper-") and n.endswith("-ray"))
    seven = host["paper-7b-ray"]
    p = cm.MODELS["Qwen/Qwen2.5-Coder-7B-Instruct"].params
    # both roles' fp32 weights and AdamW moments offloaded; one fp32 copy read at start, not one per rank
    assert float(seven[4]) == pytest.approx(2 * 12 * p / 2**30, abs=0.05)
    start, read = seven[6].split()
    assert float(read.strip("()")) == pytest.approx(4 * p / 2**30, abs=0.05)
    before = float(seven[10].split()[0])
    assert float(start) < before - 2.9 * 4 * p / 2**30  # the 3 other ranks of a group read no copy
    assert seven[-1].strip(" |") == "PASS" and float(seven[9].strip("*")) < 0.9 * 1024


def test_a_node_with_too_little_host_memory_fails_the_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert cm.main(["--check", "--preset", "paper-7b-ray", "--host-gib", "256"]) == 1
    out = capsys.readouterr().out
    row = next(r for r in out.splitlines() if r.startswith("| paper-7b-ray") and "256 GiB host" in r)
    assert row.endswith("| FAIL: over 230 GiB |") and "1 FAIL" in out
