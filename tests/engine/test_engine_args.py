"""The keyword arguments a vLLM engine is started with (``vllm_local.roles.engine_args``), built
without starting vLLM: on CPU exactly what they were before GPU plans existed, on CUDA the budget of
the engine's GPU plan; and the CUDA start-up path of the local backend with vLLM itself stubbed out."""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from codea1.config import load_config
from codea1.engine import memory as mem
from codea1.engine.vllm_local import roles as vroles

SMOL = SimpleNamespace(num_attention_heads=9, num_key_value_heads=3, hidden_size=576, num_hidden_layers=30)
QWEN_1_5B = mem.ModelShape("Qwen/Qwen2.5-Coder-1.5B-Instruct", 28, 1536, 8960, 12, 2, 151936, tied=True)
QWEN_7B = mem.ModelShape("Qwen/Qwen2.5-Coder-7B-Instruct", 28, 3584, 18944, 28, 4, 152064, tied=False)


def test_the_cpu_engine_arguments_are_unchanged() -> None:
    cfg = load_config("tiny-cpu")
    longest = max(r.sampling.max_prompt_tokens + r.sampling.max_new_tokens for r in (cfg.coder, cfg.tester))
    sequences = max(cfg.coder.sampling.batch_size, cfg.tester.sampling.batch_size)
    per_token = 2 * 30 * 3 * 64 * 4  # K and V, layers, kv heads, head dim, fp32 bytes
    expected = {
        "model": "/m",
        "tokenizer": "/m",
        "dtype": "float32",
        "seed": cfg.train.seed,
        "max_model_len": longest,
        "max_num_seqs": sequences,
        "kv_cache_memory_bytes": max(64 << 20, math.ceil(sequences * longest * per_token * 1.1)),
        "logprobs_mode": "processed_logprobs",
        "enforce_eager": True,
        "use_tqdm_on_load": False,
        "max_num_batched_tokens": max(sequences * longest, 4096),
        "weight_transfer_config": {"backend": "codea1_buckets"},  # syncs through vLLM's API
    }
    args = vroles.engine_args(cfg, "/m", torch.float32, in_process=True, model_config=SMOL)
    assert args == expected  # no gpu_memory_utilization: vLLM's CPU worker ignores it with a KV size
    fixed = load_config("tiny-cpu", ["engine.vllm_kv_cache_gib=0.5"])
    assert vroles.engine_args(fixed, "/m", torch.float32, in_process=True, model_config=SMOL)[
        "kv_cache_memory_bytes"
    ] == (1 << 29)
    loud = vroles.engine_args(cfg, "/m", torch.float32, in_process=True, model_config=SMOL, quiet=False)
    assert loud["use_tqdm_on_load"] is True


def test_the_cuda_engine_arguments_are_its_budget() -> None:
    cfg = load_config("paper-1.5b-ray")
    budget = mem.replica_plan(cfg, ["coder"], QWEN_1_5B, 79.0).engines[0]
    args = vroles.engine_args(cfg, "/m", torch.bfloat16, in_process=False, budget=budget, sleep_mode=True)
    assert args["gpu_memory_utilization"] == budget.utilization
    assert args["kv_cache_memory_bytes"] == budget.kv_bytes == 56 << 30
    assert args["max_num_seqs"] == budget.max_num_seqs
    assert (
        args["dtype"] == "bfloat16" and args["enforce_eager"] is False and args["enable_sleep_mode"] is True
    )
    assert "max_num_batched_tokens" not in args  # vLLM's own default for the GPU
    assert args["weight_transfer_config"] == {"backend": "ipc"}  # vLLM's CUDA IPC beside the learners
    assert "worker_extension_cls" not in args
    with pytest.raises(ValueError, match="budget"):
        vroles.engine_args(cfg, "/m", torch.bfloat16, in_process=False)


def stub_gpu(monkeypatch: pytest.MonkeyPatch, model: mem.ModelShape, total_gib: float) -> None:
    monkeypatch.setattr(vroles, "model_shape", lambda location: model)
    monkeypatch.setattr(vroles, "gpu_total_gib", lambda: total_gib)


def test_a_gpu_without_room_is_one_clear_error_before_vllm_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    stub_gpu(monkeypatch, QWEN_7B, 79.0)
    cfg = load_config("paper-7b", ["engine.rollout=vllm"])
    with pytest.raises(vroles.VLLMStartError, match="beside the learners on one GPU: coder engine") as e:
        vroles.local_budgets(cfg, {"coder": "/m", "tester": "/m"}, torch.bfloat16, shared=False)
    assert "\n" not in str(e.value) and "engine.vllm_kv_cache_gib" in str(e.value)
    # one rank holding a whole 7B learner does not fit beside its sleeping replica
    colocated = load_config(
        "paper-7b-ray",
        ["cluster.learner_workers=1", "cluster.rollout_replicas=1", "engine.vllm_kv_cache_gib=0"],
    )
    with pytest.raises(vroles.VLLMStartError, match="rollout replica: .* while the engines sleep"):
        vroles.replica_budget(colocated, ["coder"], "/m", torch.bfloat16)
    stub_gpu(monkeypatch, QWEN_1_5B, 79.0)
    budget = vroles.replica_budget(load_config("paper-1.5b-ray"), ["coder"], "/m", torch.bfloat16)
    assert budget.kv_bytes == 56 << 30


@dataclass
class FakeRoles:
    coder_policy: Any
    tester_policy: Any
    coder_learner: Any = None
    tester_learner: Any = None


def test_the_local_backend_starts_both_engines_with_their_budgets_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stub_gpu(monkeypatch, QWEN_1_5B, 139.0)
    started: list[tuple[str, Any]] = []

    def start(cfg: Any, location: str, dtype: torch.dtype, in_process: bool, **kw: Any) -> str:
        assert not in_process and dtype == torch.bfloat16
        assert kw["sleep_mode"] is True  # beside the learners on CUDA: vLLM's sleep mode
        started.append((location, kw["budget"]))
        return f"engine {len(started)}"

    monkeypatch.setattr(vroles, "pick_device", lambda device: torch.device("cuda"))
    monkeypatch.setattr(vroles, "model_location", lambda spec, cache_dir="": f"/models/{spec}")
    monkeypatch.setattr(vroles, "start_engine", start)
    cfg = load_config("paper-1.5b", ["engine.rollout=vllm", "engine.tester_model=Qwen/Other"])
    hf = SimpleNamespace(tokenizer=None, eos_ids={2, 1})
    learners = [SimpleNamespace(before_work=[]), SimpleNamespace(before_work=[])]
    roles = vroles.attach_vllm(FakeRoles(hf, hf, *learners), cfg, shared=False)
    assert [len(x.before_work) for x in learners] == [2, 2]  # each learner sleeps both engines
    plan = mem.local_plan(cfg, {"coder": QWEN_1_5B, "tester": QWEN_1_5B}, 139.0, shared=False, weight_bytes=2)
    assert started == [
        ("/models/Qwen/Qwen2.5-Coder-1.5B-Instruct", plan.engines[0]),
        ("/models/Qwen/Other", plan.engines[1]),
    ]
    assert roles.coder_policy.rollout.llm == "engine 1" and roles.tester_policy.rollout.llm == "engine 2"
    assert roles.coder_policy.rollout.sleeper.enabled and roles.tester_policy.rollout.sleeper.enabled
    assert sorted(roles.tester_policy.eos_ids) == [1, 2]
