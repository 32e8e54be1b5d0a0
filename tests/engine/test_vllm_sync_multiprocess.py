"""The weight sync into a vLLM engine in its own process (vLLM's normal mode, as on CUDA), on CPU.

SmolLM2-135M, fp32: the engine core runs in a child process (``VLLM_ENABLE_V1_MULTIPROCESSING=1``)
with vLLM's weight-transfer backend ``codea1_buckets`` (registered there by codea1's
``worker_extension_cls``); weights travel in buckets of 32 MiB through vLLM's weight-transfer API
(``LLM.update_weights``; no file, nothing in ``/dev/shm``). After a push the engine samples the learner's
new weights: sampled-token log-probs match the learner's within 1e-3 (as for the in-process engine,
``test_vllm_engine.py``) and greedy completions equal transformers' on the learner's weights. Then
the same weights, rounded to bf16 in the learner, are sent as bf16 (the GPU rollout dtype): half
the bytes, the same samples.
"""

from __future__ import annotations

import functools
import os
import stat
import tempfile
import time

import pytest
import torch

from codea1.config import load_config
from codea1.core.losses import policy_loss
from codea1.engine.base import SamplingParams, push_weights
from codea1.engine.vllm_local.available import vllm_import_error
from codea1.engine.vllm_local.ipc_dir import IPC_DIR_VARIABLE, use_private_ipc_dir
from codea1.engine.vllm_local.weight_sync import buckets
from tests.demo_model import require_demo_model
from tests.engine.sampled_batches import greedy_transformers, max_logprob_gap, signed_batch

require_demo_model()
if vllm_import_error():
    pytest.skip(f"vLLM is not usable here: {vllm_import_error()}", allow_module_level=True)

TOL = 1e-3
BUCKET = 32 << 20
QUESTIONS = ["Write a Python function add(a, b).", "Say hi.", "What is 2 + 3?"]
SETTINGS = [
    "engine.rollout=transformers", "engine.dtype=float32", "engine.device=cpu", "engine.mode=separate",
    "loss.kl_coef=0", "coder.sampling.temperature=0.7",
    "coder.sampling.max_prompt_tokens=256", "coder.sampling.max_new_tokens=16",
    "tester.sampling.max_prompt_tokens=256", "tester.sampling.max_new_tokens=16",
    "coder.sampling.batch_size=8", "tester.sampling.batch_size=8",
    "coder.optim.lr=1e-3", "coder.optim.warmup_steps=0", "tester.optim.warmup_steps=0",
]  # fmt: skip
pg_loss = functools.partial(policy_loss, kl_coef=0.0)


def start_multiprocess_engine(cfg, location: str):
    """A ``vllm.LLM`` as ``roles.start_engine`` builds it on CPU, but with the engine core in its
    own process and the weight-sync extension, as on CUDA."""
    from transformers import AutoConfig
    from vllm import LLM

    from codea1.engine.vllm_local.console import quiet_vllm_logging
    from codea1.engine.vllm_local.roles import (
        cpu_scheduler_args,
        kv_cache_bytes,
        max_model_len,
        max_sequences,
    )
    from codea1.engine.vllm_local.weight_sync import BUCKETS_BACKEND, REGISTERING_EXTENSION

    quiet_vllm_logging()
    return LLM(
        model=location,
        tokenizer=location,
        dtype="float32",
        seed=cfg.train.seed,
        max_model_len=max_model_len(cfg),
        max_num_seqs=max_sequences(cfg),
        kv_cache_memory_bytes=kv_cache_bytes(cfg, AutoConfig.from_pretrained(location), torch.float32),
        logprobs_mode="processed_logprobs",
        enforce_eager=True,
        weight_transfer_config={"backend": BUCKETS_BACKEND},
        worker_extension_cls=REGISTERING_EXTENSION,  # registers codea1_buckets in the engine's process
        **cpu_scheduler_args(cfg),
    )


@pytest.fixture(scope="module")
def setup():
    """The transformers roles (the learner) and a multiprocess vLLM policy for the coder."""
    import vllm.envs

    from codea1.engine.build import build
    from codea1.engine.loading import model_location
    from codea1.engine.vllm_local.policy import VLLMPolicy, VLLMRollout

    cfg = load_config("tiny-cpu", SETTINGS)
    roles = build(cfg)
    patch = pytest.MonkeyPatch()
    patch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # an in-process engine may have set 0 before
    patch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    patch.delenv(IPC_DIR_VARIABLE, raising=False)  # undo() removes the private directory's name again
    ipc_dir = use_private_ipc_dir()  # as roles.start_engine does for an engine in another process
    vllm.envs.disable_envs_cache()  # an in-process engine started earlier freezes vLLM's env reads
    system_sockets = _sockets(tempfile.gettempdir())
    start = time.perf_counter()
    llm = start_multiprocess_engine(cfg, model_location(cfg.engine.coder_model, cfg.engine.cache_dir))
    print(f"\nmultiprocess engine started in {time.perf_counter() - start:.1f} s")
    patch.undo()
    assert _sockets(ipc_dir), "the engine's IPC sockets are not in the private directory"
    assert llm.llm_engine.engine_core.__class__.__name__ == "SyncMPClient"  # another process
    hf = roles.coder_policy
    policy = VLLMPolicy(
        VLLMRollout(llm, in_process=False, bucket_bytes=BUCKET), hf.tokenizer, sorted(hf.eos_ids), "coder"
    )
    yield roles, policy
    llm.llm_engine.engine_core.shutdown()
    # vLLM's shutdown leaves its socket files; they are in the private directory (removed when the
    # process exits), none in the system's temporary directory
    assert _sockets(tempfile.gettempdir()) <= system_sockets


def _sockets(directory: str) -> set[str]:
    """The names of the socket files in ``directory``."""
    return {e.name for e in os.scandir(directory) if stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode)}


def _prompts(policy):
    return [policy.render([{"role": "user", "content": q}]) for q in QUESTIONS]


def _sample_and_compare(policy, learner, prompts, seed: int) -> float:
    comps = policy.generate(prompts, SamplingParams(n=2, temperature=0.7, max_new_tokens=16, seed=seed))
    return max_logprob_gap(comps, learner.logprobs(signed_batch(comps)))


def test_a_push_reaches_an_engine_in_another_process_in_buckets_fp32_then_bf16(setup):
    roles, policy = setup
    learner = roles.coder_learner
    prompts = _prompts(policy)
    seen: dict[str, object] = {"base": _sample_and_compare(policy, learner, prompts, seed=3)}

    comps = policy.generate(prompts, SamplingParams(n=2, temperature=0.7, max_new_tokens=16, seed=5))
    batch = signed_batch(comps)
    batch.old_logprobs = learner.logprobs(batch)
    learner.train_step(batch, pg_loss)
    seen["stale"] = _sample_and_compare(policy, learner, prompts, seed=6)

    push_weights(learner, policy)
    weights = learner.named_weights()
    fp32_bytes = sum(t.numel() * 4 for t in weights.values())
    seen["fp32 sync"] = fp32 = dict(policy.rollout.last_sync)
    seen["fp32 stats"] = {k: v for k, v in policy.last_stats.items() if k.startswith("sync_")}
    seen["fp32 fresh"] = _sample_and_compare(policy, learner, prompts, seed=6)
    greedy = policy.generate(prompts, SamplingParams(n=1, temperature=0.0, max_new_tokens=16))
    seen["fp32 greedy"] = [c.completion_ids for c in greedy] == greedy_transformers(learner, policy, prompts)

    # bf16 on the wire (the rollout dtype on GPU): the learner's weights rounded to bf16 first, so
    # the engine must sample exactly them
    with torch.no_grad():
        for p in learner.params.values():
            p.copy_(p.to(torch.bfloat16).to(p.dtype))
    policy.rollout.dtype = torch.bfloat16
    push_weights(learner, policy)
    seen["bf16 sync"] = bf16 = dict(policy.rollout.last_sync)
    seen["bf16 fresh"] = _sample_and_compare(policy, learner, prompts, seed=8)
    greedy = policy.generate(prompts, SamplingParams(n=1, temperature=0.0, max_new_tokens=16))
    seen["bf16 greedy"] = [c.completion_ids for c in greedy] == greedy_transformers(learner, policy, prompts)
    print(f"\nmultiprocess sync of SmolLM2-135M: {seen}")

    assert seen["base"] < TOL  # both hold the base model
    assert seen["stale"] > 10 * TOL  # not synced yet
    assert fp32["bytes"] == fp32_bytes and fp32["tensors"] == len(weights)
    assert fp32["buckets"] == len(list(buckets(weights, None, BUCKET))) > 1  # bounded buckets
    assert seen["fp32 stats"] == {"sync_seconds": fp32["seconds"], "sync_bytes": fp32_bytes}
    assert seen["fp32 fresh"] < TOL and seen["fp32 greedy"]
    assert bf16["bytes"] == fp32_bytes // 2 and bf16["buckets"] < fp32["buckets"]
    assert seen["bf16 fresh"] < TOL and seen["bf16 greedy"]
