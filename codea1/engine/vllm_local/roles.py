"""Start vLLM engines for the roles and put :class:`VLLMPolicy` objects in front of the learners.

On CPU the engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: no engine-core or
worker processes, load in seconds, weight sync without copies across processes), eager (no
inductor compile, which takes over a minute), with a KV cache sized from the configuration rather
than vLLM's default of 0.9 × RAM. On CUDA it runs in vLLM's normal multiprocess mode.

``separate`` mode starts one engine per role (the roles may be different models); ``adapters``
mode and self-play start one engine for both roles. vLLM's prefix cache is reset after every
weight sync, since cached prompt KV was computed with the old weights. vLLM logs errors only unless
``CODEA1_VLLM_LOGS=1`` (``console``).

Imports: torch, transformers (config), vllm, config, engine.loading, engine.lora, this package.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import torch

from codea1.config import RunConfig
from codea1.engine.loading import model_location, pick_device, pick_dtype
from codea1.engine.lora import base_weights
from codea1.engine.vllm_local.console import engine_start_warnings_hidden, quiet_vllm_logging
from codea1.engine.vllm_local.policy import VLLMPolicy, VLLMRollout

CPU_ENVIRONMENT = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
}
"""Set (unless already set) before a CPU engine starts: in-process engine, no core held back."""
MIN_KV_BYTES = 64 << 20
CPU_MIN_BATCHED_TOKENS = 4096
"""vLLM's own default token budget of one CPU scheduling step."""


class VLLMStartError(RuntimeError):
    """vLLM is not importable or an engine did not start; the message says why."""


def kv_cache_bytes(cfg: RunConfig, model_config: Any, dtype: torch.dtype) -> int:
    """KV-cache bytes for ``engine.vllm_kv_cache_gib``, or when 0 for the largest sampling batch
    (``sampling.batch_size`` sequences) at the longest prompt + completion of either role."""
    if cfg.engine.vllm_kv_cache_gib > 0:
        return int(cfg.engine.vllm_kv_cache_gib * (1 << 30))
    heads = model_config.num_attention_heads
    kv_heads = getattr(model_config, "num_key_value_heads", None) or heads
    head_dim = getattr(model_config, "head_dim", None) or model_config.hidden_size // heads
    per_token = 2 * model_config.num_hidden_layers * kv_heads * head_dim * dtype.itemsize
    tokens = max_sequences(cfg) * max_model_len(cfg)
    return max(MIN_KV_BYTES, math.ceil(tokens * per_token * 1.1))


def max_model_len(cfg: RunConfig) -> int:
    """The longest prompt + completion either role samples."""
    return max(r.sampling.max_prompt_tokens + r.sampling.max_new_tokens for r in (cfg.coder, cfg.tester))


def max_sequences(cfg: RunConfig) -> int:
    """Sequences the engine runs at once: the larger ``sampling.batch_size`` of the two roles."""
    return max(cfg.coder.sampling.batch_size, cfg.tester.sampling.batch_size)


def cpu_scheduler_args(cfg: RunConfig) -> dict[str, Any]:
    """Scheduler settings of an in-process CPU engine: a step's token budget that holds every
    running sequence whole.

    codea1 seeds every request. When a step's token budget cuts a prompt's prefill in two, vLLM
    rewinds that request's generator with ``set_offset``, which a CPU ``torch.Generator`` does not
    support: the engine dies with "CPU Generator does not use offset" as soon as a batch of prompts
    exceeds the budget (an evaluation point of 16 problems x 8 samples does). With room for
    ``max_num_seqs`` sequences of ``max_model_len`` tokens no prompt is ever split. (Turning chunked
    prefill off avoids the split too, but cost 15 % more CPU time on a tester-sized batch: 48
    prompts of 1,092 tokens, 128 new tokens, SmolLM2-135M fp32.)"""
    return {"max_num_batched_tokens": max(max_sequences(cfg) * max_model_len(cfg), CPU_MIN_BATCHED_TOKENS)}


def start_engine(
    cfg: RunConfig, location: str, dtype: torch.dtype, in_process: bool, *, sleep_mode: bool = False
) -> Any:
    """A ``vllm.LLM`` for the model at ``location`` (processed log-probs, seeded from the run);
    ``sleep_mode`` (CUDA only) lets it free its GPU memory between rollouts (``LLM.sleep``)."""
    from transformers import AutoConfig

    if in_process:
        for key, value in CPU_ENVIRONMENT.items():
            os.environ.setdefault(key, value)
    from codea1.engine.vllm_local.available import vllm_import_error

    error = vllm_import_error()
    if error:
        raise VLLMStartError(f"engine.rollout=vllm: {error}")
    from vllm import LLM

    quiet = quiet_vllm_logging()  # again: something may have imported vLLM before us
    model_config = AutoConfig.from_pretrained(location)
    try:
        with engine_start_warnings_hidden(quiet):
            return LLM(
                model=location,
                tokenizer=location,
                dtype={torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype],
                seed=cfg.train.seed,
                max_model_len=max_model_len(cfg),
                max_num_seqs=max_sequences(cfg),
                kv_cache_memory_bytes=kv_cache_bytes(cfg, model_config, dtype),
                logprobs_mode="processed_logprobs",
                enforce_eager=in_process,
                use_tqdm_on_load=not quiet,
                **(cpu_scheduler_args(cfg) if in_process else {}),
                **({"enable_sleep_mode": True} if sleep_mode else {}),
            )
    except Exception as e:  # vLLM raises many types while starting (ValueError, RuntimeError, OSError)
        raise VLLMStartError(f"vLLM did not start for {location}: {type(e).__name__}: {e}") from e


def attach_vllm(roles: Any, cfg: RunConfig, *, shared: bool) -> Any:
    """``roles`` (built by ``hf_local.build_roles``) with vLLM policies in place of its policies.

    The learners are untouched; the trainer moves their weights to these policies.
    """
    engine = cfg.engine
    device = pick_device(engine.device)
    dtype = pick_dtype(engine.dtype, device)
    in_process = device.type == "cpu"
    coder_location = model_location(engine.coder_model, engine.cache_dir)

    def policy(rollout: VLLMRollout, hf_policy: Any, role: str) -> VLLMPolicy:
        return VLLMPolicy(rollout, hf_policy.tokenizer, sorted(hf_policy.eos_ids), role)

    if engine.mode == "adapters":
        peft_model = roles.coder_learner.weights.peft_model
        rollout = VLLMRollout(
            start_engine(cfg, coder_location, dtype, in_process),
            in_process=in_process,
            base=base_weights(peft_model),
            lora_scale=engine.lora_scale,
        )
        coder = policy(rollout, roles.coder_policy, "coder")
        tester = coder if shared else policy(rollout, roles.tester_policy, "tester")
    else:
        coder_engine = start_engine(cfg, coder_location, dtype, in_process)
        coder = policy(VLLMRollout(coder_engine, in_process=in_process), roles.coder_policy, "coder")
        if shared:
            tester = coder
        else:
            tester_location = model_location(engine.role_model("tester"), engine.cache_dir)
            tester_engine = start_engine(cfg, tester_location, dtype, in_process)
            tester = policy(VLLMRollout(tester_engine, in_process=in_process), roles.tester_policy, "tester")
    return dataclasses.replace(roles, coder_policy=coder, tester_policy=tester)
