"""The expected host memory of a local CPU run: its parts follow the settings, and the shipped presets'
totals stay near the peaks measured in docs/LOG.md."""

from __future__ import annotations

import pytest

from codea1.config import load_config
from codea1.engine.build import expected_host_plan
from codea1.engine.host_plan import host_plan
from codea1.engine.memory import GIB, ModelShape

QWEN_05B = ModelShape("qwen2.5-coder-0.5b", layers=24, hidden=896, intermediate=4864, heads=14, kv_heads=2,
                      vocab=151936, tied=False)  # fmt: skip
"""Qwen2.5-Coder-0.5B as the de-quantised GGUF has it (an untied output head)."""
SMOLLM2_135M = ModelShape("smollm2-135m", layers=30, hidden=576, intermediate=1536, heads=9, kv_heads=3,
                          vocab=49152, tied=True)  # fmt: skip


def plan(preset: str, model: ModelShape, *overrides: str, rollout: str = "vllm", one_model: bool = False):
    cfg = load_config(preset, ["engine.coder_model=unused", *overrides])
    return host_plan(cfg, model, weight_bytes=4, rollout=rollout, one_model=one_model)


@pytest.mark.parametrize(
    ("preset", "model", "measured_gib"),
    [("qwen-coder-0.5b-cpu", QWEN_05B, 7.7), ("demo-cpu", SMOLLM2_135M, 3.6)],
)
def test_the_shipped_presets_are_planned_near_their_measured_peaks(preset, model, measured_gib):
    """One a1 step's ``memory/peak_rss_gib`` on a 2-core fp32 CPU (docs/LOG.md, 2026-12-03)."""
    assert plan(preset, model).total == pytest.approx(measured_gib, rel=0.15)


def test_a_bf16_learner_is_planned_with_its_state_in_bf16():
    """A CPU learner trains its weights in their own dtype (no fp32 master copy): in bf16 a trained
    parameter's weight, gradient and AdamW moments take 8 bytes, not 16. tiny-cpu (two full models)
    returning its memory peaked at 6.31 GiB in one a1 step on a 2-core CPU with native bf16
    (docs/LOG.md, 2026-12-05); with 16 bytes the plan said 9.2."""
    cfg = load_config("tiny-cpu", ["engine.cpu_heap=return"])
    bf16 = host_plan(cfg, SMOLLM2_135M, weight_bytes=2, rollout="vllm")
    fp32 = host_plan(cfg, SMOLLM2_135M, weight_bytes=4, rollout="vllm")
    assert bf16.learners == pytest.approx(fp32.learners / 2)
    trained = 2 * SMOLLM2_135M.params * 4 * 2 / GIB  # two roles, 4 copies of 2 bytes
    assert bf16.learners == pytest.approx(trained + 2 * SMOLLM2_135M.params * 2 / GIB)  # + references
    assert bf16.total == pytest.approx(6.31, rel=0.15)


def test_adapters_share_one_base_and_the_engine_keeps_only_the_packed_head():
    adapters, separate = (
        plan("qwen-coder-0.5b-cpu", QWEN_05B),
        plan("qwen-coder-0.5b-cpu", QWEN_05B, "engine.mode=separate"),
    )
    matrix = QWEN_05B.vocab * QWEN_05B.hidden * 4 / GIB
    layers = QWEN_05B.layers * QWEN_05B.layer_params * 4 / GIB
    assert adapters.engine == pytest.approx(layers + matrix)
    assert separate.engine == pytest.approx(2 * (layers + 4 * matrix))  # an engine per role, nothing shared
    assert separate.learners > 6 * adapters.learners  # two models with fp32 AdamW state vs one frozen base
    assert separate.kv_cache == pytest.approx(2 * adapters.kv_cache)
    one = plan("qwen-coder-0.5b-cpu", QWEN_05B, "engine.mode=separate", one_model=True)
    assert one.learners == pytest.approx(separate.learners / 2) and one.engine == pytest.approx(
        separate.engine / 2
    )


def test_transformers_rollouts_hold_a_merged_copy_and_no_kv_cache():
    vllm, hf = plan("demo-cpu", SMOLLM2_135M), plan("demo-cpu", SMOLLM2_135M, rollout="transformers")
    assert hf.kv_cache == 0 and vllm.kv_cache > 0
    assert hf.engine == pytest.approx(SMOLLM2_135M.params * 4 / GIB)
    assert hf.runtime < vllm.runtime


def test_the_update_follows_the_micro_batch_and_the_kv_cache_the_sampling_batch():
    base = plan("qwen-coder-0.5b-cpu", QWEN_05B)
    halves = plan(
        "qwen-coder-0.5b-cpu", QWEN_05B, "coder.optim.micro_batch_size=2", "tester.optim.micro_batch_size=2"
    )
    assert halves.work < base.work
    assert plan("qwen-coder-0.5b-cpu", QWEN_05B, "engine.logprob_chunk=256").work > base.work
    fewer = plan(
        "qwen-coder-0.5b-cpu", QWEN_05B, "coder.sampling.batch_size=8", "tester.sampling.batch_size=8"
    )
    assert fewer.kv_cache == pytest.approx(base.kv_cache / 2, rel=0.01)
    assert "expected peak" in base.line() and "KV cache" in base.line()


@pytest.mark.parametrize(
    "overrides", [["engine.kind=scripted"], ["engine.backend=ray"], ["engine.device=cuda"]]
)
def test_only_local_cpu_runs_get_a_host_plan(overrides):
    assert expected_host_plan(load_config("demo-cpu", overrides), "vllm") is None


def test_a_model_whose_config_cannot_be_read_gets_no_plan(tmp_path):
    cfg = load_config("demo-cpu", [f"engine.coder_model={tmp_path / 'missing'}"])
    assert expected_host_plan(cfg, "vllm") is None


def test_a_run_that_keeps_its_freed_memory_is_planned_with_it():
    """``engine.cpu_heap=keep`` adds the kept heap, near the peaks one a1 step measured on a 2-core
    CPU with native bf16 (docs/LOG.md, 2026-12-05): 8.01 GiB for qwen-coder-0.5b-cpu, 2.95-2.99 for
    demo-cpu (5.78 and 2.70-2.78 with the memory returned)."""
    for preset, model, overrides, measured in (
        ("qwen-coder-0.5b-cpu", QWEN_05B, ["engine.cpu_mmap_threshold=0"], 8.01),
        ("demo-cpu", SMOLLM2_135M, [], 2.97),
    ):
        cfg = load_config(preset, ["engine.coder_model=unused", "engine.cpu_heap=keep", *overrides])
        kept = host_plan(cfg, model, weight_bytes=2, rollout="vllm")
        returned = host_plan(
            load_config(preset, ["engine.coder_model=unused"]), model, weight_bytes=2, rollout="vllm"
        )
        assert returned.kept == 0 and kept.kept == pytest.approx(2 * kept.work)
        assert kept.total == pytest.approx(measured, rel=0.15)
        assert "kept heap" in kept.line() and "kept heap" not in returned.line()


def test_a_process_on_tcmalloc_plans_no_kept_heap(monkeypatch: pytest.MonkeyPatch):
    """On TCMalloc ``engine.cpu_heap`` does nothing (``tiny-cpu`` keeps only where TCMalloc is
    missing): its peaks were at or below glibc's returned ones (docs/LOG.md, 2026-12-06)."""
    from codea1.engine import host_plan as plans

    cfg = load_config("tiny-cpu", [])
    assert cfg.engine.cpu_heap == "keep" and cfg.engine.cpu_malloc == "tcmalloc"
    monkeypatch.setattr(plans, "tcmalloc_loaded", lambda: False)
    assert host_plan(cfg, SMOLLM2_135M, weight_bytes=2, rollout="vllm").kept > 0  # the fallback keeps
    monkeypatch.setattr(plans, "tcmalloc_loaded", lambda: True)
    assert host_plan(cfg, SMOLLM2_135M, weight_bytes=2, rollout="vllm").kept == 0


def test_a_ray_node_reads_one_copy_per_group_at_start_and_offloads_fp32_state() -> None:
    from codea1.engine.host_plan import LEARNER_PROCESS_GIB, REPLICA_PROCESS_GIB, ray_node_host_plan

    seven_b = ModelShape("7b", layers=28, hidden=3584, intermediate=18944, heads=28, kv_heads=4,
                         vocab=152064, tied=False)  # fmt: skip
    cfg = load_config("paper-7b-ray")
    p = seven_b.params
    h = ray_node_host_plan(cfg, {"coder": seven_b, "tester": seven_b}, shared=False)
    assert h.reading == pytest.approx(4 * p / GIB) and h.reading_per_rank == pytest.approx(4 * 4 * p / GIB)
    assert h.offloaded == pytest.approx(2 * 12 * p / GIB) and h.references == pytest.approx(2 * 2 * p / GIB)
    assert h.sleep_backups == 0.0  # separate mode: every sync writes all weights, sleep level 2
    assert h.runtime == 8 * LEARNER_PROCESS_GIB + 8 * REPLICA_PROCESS_GIB
    # the tester group starts while the coder's fp32 weights are offloaded (no AdamW state yet)
    assert h.start == pytest.approx(h.runtime + h.references + 4 * p / GIB + h.reading)
    assert h.peak == pytest.approx(h.steady + 4 * p / GIB)  # a checkpoint gathers one fp32 model
    split = ray_node_host_plan(load_config("paper-7b-ray", ["cluster.placement=split"]),
                               {"coder": seven_b, "tester": seven_b}, shared=False)  # fmt: skip
    assert split.offloaded == 0.0  # nothing leaves a GPU of its own
    lora = ray_node_host_plan(load_config("paper-7b-ray", ["engine.mode=adapters"]),
                              {"coder": seven_b, "tester": seven_b}, shared=False)  # fmt: skip
    assert lora.sleep_backups == pytest.approx(4 * 2 * p / GIB) and lora.references == 0.0
