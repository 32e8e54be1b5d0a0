"""``benchmarks/cluster_memory.py``: the arithmetic checked against numbers worked out by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codea1.config import load_config
from tests.benchmarks.benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "cluster_memory.py"


cm = load_benchmark("cluster_memory")


@pytest.mark.parametrize(
    ("name", "params"),
    [
        # embedding 151,936 x 1,536 + 28 layers x 46,797,824 + final norm 1,536 (head tied): "1.54B"
        ("Qwen/Qwen2.5-Coder-1.5B-Instruct", 1_543_714_304),
        # 151,936 x 2,048 + 36 x 77,076,992 + 2,048: "3.09B"
        ("Qwen/Qwen2.5-Coder-3B-Instruct", 3_085_938_688),
        # 2 x 152,064 x 3,584 (untied head) + 28 x 233,057,792 + 3,584: "7.61B"
        ("Qwen/Qwen2.5-Coder-7B-Instruct", 7_615_616_512),
    ],
)
def test_parameter_counts_match_the_model_cards(name: str, params: int) -> None:
    assert cm.MODELS[name].params == params


def test_one_layer_of_the_1_5b_model_by_hand() -> None:
    m = cm.MODELS["Qwen/Qwen2.5-Coder-1.5B-Instruct"]
    q, kv_proj, o = 1536 * 1536 + 1536, 1536 * 256 + 256, 1536 * 1536
    assert m.layer_params == q + 2 * kv_proj + o + 3 * 1536 * 8960 + 2 * 1536 == 46_797_824
    # keys and values of 28 layers x 2 kv heads x 128 dims, bf16
    assert m.kv_bytes_per_token(2) == 2 * 28 * 2 * 128 * 2 == 28_672


def test_learner_rank_of_paper_1_5b_ray_by_hand() -> None:
    cfg = load_config("paper-1.5b-ray")
    m = cm.learner_memory(cfg, "coder", cm.MODELS[cfg.engine.coder_model])
    p, ranks, gib = 1_543_714_304, 2, float(1 << 30)
    assert m.ranks == ranks and m.tokens == 32768  # the preset's optim.micro_batch_tokens
    assert m.states_bf16 == pytest.approx(8 * p / ranks / gib)  # bf16 weights, grads, AdamW m and v
    assert m.states_fp32 == pytest.approx(16 * p / ranks / gib)
    assert m.reference == 0 and m.reference_host == pytest.approx(2 * p / ranks / gib)  # CPUOffloadPolicy
    assert m.mask == pytest.approx((1 << 28) * 5 / gib)  # the shared-prompt mask at its limit
    assert m.total == pytest.approx(
        m.states_bf16 + m.fsdp_buffers + m.activations + m.mask + cm.LEARNER_OVERHEAD_GIB
    )
    assert m.total_fp32_states - m.total == pytest.approx(8 * p / ranks / gib)


def test_replica_kv_cache_of_paper_1_5b_ray() -> None:
    cfg = load_config("paper-1.5b-ray")
    r = cm.replica_memory(cfg, cm.MODELS[cfg.engine.coder_model])
    # 256 sequences x (8,192 + 4,096) tokens x 28,672 bytes: the whole batch at full length
    assert r.kv_full_batch == pytest.approx(256 * 12288 * 28_672 / (1 << 30)) and r.kv_full_batch == 84.0
    assert r.kv_cache == cfg.engine.vllm_kv_cache_gib


def test_every_ray_preset_fits_an_80_gib_gpu_conservatively() -> None:
    for name in cm.PRESETS:
        cfg = load_config(name)
        for role in ("coder", "tester"):
            assert cm.learner_memory(cfg, role, cm.model_of(cfg, role)).total_fp32_states <= 80, (name, role)
        assert cm.replica_memory(cfg, cm.model_of(cfg, "coder")).total <= 80, name


def test_the_script_prints_both_tables() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| paper-")]
    assert len(rows) == 3 * 2 + 3  # a learner row per preset and role, a replica row per preset
    assert "| paper-1.5b-ray | coder | Qwen2.5-Coder-1.5B-Instruct | 1.54 B | 2 |" in done.stdout


def test_an_unknown_model_is_a_one_line_error() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--preset", "tiny-cpu"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode != 0 and "no architecture numbers for 'smollm2-135m'" in done.stderr
    assert "Traceback" not in done.stderr
