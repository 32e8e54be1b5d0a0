"""Start vLLM engines for the roles and put :class:`VLLMPolicy` objects in front of the learners.

On CPU the engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: no engine-core or
worker processes, load in seconds, weight sync without copies across processes), eager (no
inductor compile, which takes over a minute), with a KV cache sized from the configuration rather
than vLLM's default of 0.9 × RAM. On CUDA it runs in vLLM's normal multiprocess mode, with the KV
cache, ``gpu_memory_utilization`` and ``max_num_seqs`` of the plan of its GPU
(``codea1.engine.memory``): here the one GPU the learners share with the engines
(:func:`local_budgets`), on Ray a replica's GPU (:func:`replica_budget`). A GPU with no room for a
plan is a :class:`VLLMStartError` before vLLM starts.

``separate`` mode starts one engine per role (the roles may be different models); ``adapters``
mode and self-play start one engine for both roles. vLLM's prefix cache is reset after every
weight sync, since cached prompt KV was computed with the old weights. vLLM logs errors only unless
``CODEA1_VLLM_LOGS=1`` (``console``). An in-process ``adapters`` engine reads the frozen embedding
and output head from the learners' base (``frozen_tensors``). On CUDA the engines share the GPU
with the learners and start with vLLM's sleep mode: they sleep whenever a learner computes and wake
for the next weight sync or rollout (``engine.sleep_mode``; the plan's two phases).

Imports: torch, transformers (config), vllm, config, engine.host_memory, engine.loading, engine.lora, engine.memory,
this package.
"""

from __future__ import annotations

import dataclasses
import gc
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from codea1.config import RunConfig
from codea1.engine.host_memory import release_free_heap
from codea1.engine.loading import model_location, pick_device, pick_dtype
from codea1.engine.lora import adapted_weights, base_weights
from codea1.engine.memory import (
    GIB,
    EngineBudget,
    ModelShape,
    default_kv_bytes,
    local_plan,
    max_model_len,
    max_sequences,
    replica_plan,
)
from codea1.engine.vllm_local.console import engine_start_warnings_hidden, quiet_vllm_logging
from codea1.engine.vllm_local.frozen_tensors import share_frozen_tensors
from codea1.engine.vllm_local.ipc_dir import use_private_ipc_dir
from codea1.engine.vllm_local.policy import VLLMPolicy, VLLMRollout
from codea1.engine.vllm_local.weight_sync import BUCKETS_BACKEND, REGISTERING_EXTENSION, select_backend

CPU_ENVIRONMENT = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
}
"""Set (unless already set) before a CPU engine starts: in-process engine, no core held back."""
IPC_ENVIRONMENT = {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}
"""Set before an engine with vLLM's ``ipc`` weight transfer starts (CUDA only), in the process that
starts it (the trainer's, or a Ray replica actor's), whose engine-core process inherits it. The
update's CUDA-IPC handles (``torch.multiprocessing.reductions.reduce_tensor``'s arguments: classes,
a ``torch.dtype``) reach the engine core through vLLM's msgpack RPC (``vllm/v1/serial_utils.py``),
which pickles them only with this switch, and the engine core caches its environment when it
starts; vLLM's own ``examples/rl/rlhf_ipc.py`` sets it for the same reason. The pickled messages
travel only between this process and its engine core, over sockets in a directory of this process's
own (``ipc_dir``). Never set for the CPU's ``codea1_buckets`` or for ``nccl``, whose messages
msgpack carries as they are."""
CPU_MIN_BATCHED_TOKENS = 4096
"""vLLM's own default token budget of one CPU scheduling step."""
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
FIT_HINT = (
    "lower the micro-batches (optim.micro_batch_size) or the sequence lengths, size the KV cache "
    "yourself (engine.vllm_kv_cache_gib), or use the Ray backend (the paper-*-ray presets)"
)


class VLLMStartError(RuntimeError):
    """vLLM is not importable or an engine did not start; the message says why."""


def kv_cache_bytes(cfg: RunConfig, model_config: Any, dtype: torch.dtype) -> int:
    """KV-cache bytes of a CPU engine: ``engine.vllm_kv_cache_gib``, or when 0 the largest sampling
    batch (``sampling.batch_size`` sequences) at the longest prompt + completion of either role."""
    return default_kv_bytes(cfg, ModelShape.from_hf_config(model_config), dtype.itemsize)


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


def model_shape(location: str) -> ModelShape:
    """The architecture numbers of the model at ``location`` (its config only, no weights)."""
    from transformers import AutoConfig

    return ModelShape.from_hf_config(AutoConfig.from_pretrained(location), location)


def gpu_total_gib() -> float:
    """Memory of the GPU vLLM runs on (the first visible one), as vLLM's start-up check reads it."""
    return torch.cuda.get_device_properties(0).total_memory / GIB


def local_budgets(
    cfg: RunConfig, locations: Mapping[str, str], dtype: torch.dtype, *, shared: bool
) -> list[EngineBudget]:
    """The budgets of the local backend's engines, in start order, from the plan of the one GPU
    they share with the learners (``locations``: each role's model); :class:`VLLMStartError`
    when the GPU has no room for them."""
    models = {role: model_shape(location) for role, location in locations.items()}
    plan = local_plan(cfg, models, gpu_total_gib(), shared=shared, weight_bytes=dtype.itemsize)
    if plan.problem:
        raise VLLMStartError(
            f"engine.rollout=vllm beside the learners on one GPU: {plan.problem}; {FIT_HINT}"
        )
    return list(plan.engines)


def replica_budget(cfg: RunConfig, roles: Sequence[str], location: str, dtype: torch.dtype) -> EngineBudget:
    """The budget of a Ray rollout replica's engine sampling ``roles`` from the model at
    ``location``, from the plan of its GPU; :class:`VLLMStartError` when the GPU has no room."""
    plan = replica_plan(cfg, roles, model_shape(location), gpu_total_gib(), weight_bytes=dtype.itemsize)
    if plan.problem:
        raise VLLMStartError(f"rollout replica: {plan.problem}; {FIT_HINT}")
    return plan.engines[0]


def release_cuda_cache() -> None:
    """Give the blocks torch caches but no longer uses back to the GPU (models freed before an
    engine starts): vLLM's start-up check counts only the device's free memory."""
    if torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()


def engine_args(
    cfg: RunConfig,
    location: str,
    dtype: torch.dtype,
    *,
    in_process: bool,
    model_config: Any = None,
    budget: EngineBudget | None = None,
    sleep_mode: bool = False,
    quiet: bool = True,
    transfer_backend: str | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``vllm.LLM`` for the model at ``location``. In-process (CPU): the
    KV cache of :func:`kv_cache_bytes` (from ``model_config``), ``max_num_seqs`` the larger
    sampling batch, :func:`cpu_scheduler_args`, eager, no ``gpu_memory_utilization`` (vLLM's CPU
    worker does not check it when the KV cache is given). CUDA: the KV cache,
    ``gpu_memory_utilization`` and ``max_num_seqs`` of ``budget``. Both: vLLM's weight-transfer
    backend ``transfer_backend`` (default ``weight_sync.select_backend`` of the local backend:
    ``codea1_buckets`` on CPU, ``ipc`` on CUDA), and for ``codea1_buckets`` across processes the
    worker extension whose import registers it in vLLM's workers."""
    args: dict[str, Any] = {
        "model": location,
        "tokenizer": location,
        "dtype": DTYPE_NAMES[dtype],
        "seed": cfg.train.seed,
        "max_model_len": max_model_len(cfg),
        "logprobs_mode": "processed_logprobs",
        "enforce_eager": in_process,
        "use_tqdm_on_load": not quiet,
    }
    if in_process:
        args["max_num_seqs"] = max_sequences(cfg)
        args["kv_cache_memory_bytes"] = kv_cache_bytes(cfg, model_config, dtype)
        args.update(cpu_scheduler_args(cfg))
    else:
        if budget is None:
            raise ValueError("a CUDA vLLM engine needs the budget of its GPU's plan (codea1.engine.memory)")
        args["max_num_seqs"] = budget.max_num_seqs
        args["kv_cache_memory_bytes"] = budget.kv_bytes
        args["gpu_memory_utilization"] = budget.utilization
    backend = transfer_backend or select_backend(cuda=not in_process)
    args["weight_transfer_config"] = {"backend": backend}
    if backend == BUCKETS_BACKEND and not in_process:
        args["worker_extension_cls"] = REGISTERING_EXTENSION
    if sleep_mode:
        args["enable_sleep_mode"] = True
    return args


def start_engine(
    cfg: RunConfig,
    location: str,
    dtype: torch.dtype,
    in_process: bool,
    *,
    sleep_mode: bool = False,
    budget: EngineBudget | None = None,
    transfer_backend: str | None = None,
) -> Any:
    """A ``vllm.LLM`` for the model at ``location`` (processed log-probs, seeded from the run) with
    :func:`engine_args`; ``budget`` (CUDA) is the engine's part of its GPU, ``sleep_mode`` (CUDA
    only) lets it free its GPU memory between rollouts (``LLM.sleep``), ``transfer_backend`` is its
    weight-transfer backend (default: the local backend's, ``weight_sync.select_backend``); with
    ``ipc`` this process's environment gets :data:`IPC_ENVIRONMENT` first."""
    from transformers import AutoConfig

    if in_process:
        for key, value in CPU_ENVIRONMENT.items():
            os.environ.setdefault(key, value)
    if (transfer_backend or select_backend(cuda=not in_process)) == "ipc":
        os.environ.update(IPC_ENVIRONMENT)
    from codea1.engine.vllm_local.available import vllm_import_error

    error = vllm_import_error()
    if error:
        raise VLLMStartError(f"engine.rollout=vllm: {error}")
    from vllm import LLM

    from codea1.engine.vllm_local import bucket_engine  # noqa: F401  registers codea1_buckets here

    quiet = quiet_vllm_logging()  # again: something may have imported vLLM before us
    model_config = AutoConfig.from_pretrained(location) if in_process else None
    args = engine_args(
        cfg, location, dtype, in_process=in_process, model_config=model_config, budget=budget,
        sleep_mode=sleep_mode, quiet=quiet, transfer_backend=transfer_backend,
    )  # fmt: skip
    if not in_process:
        use_private_ipc_dir()  # vLLM's shutdown leaves socket files behind (ipc_dir)
        release_cuda_cache()
    try:
        with engine_start_warnings_hidden(quiet, in_process=in_process):
            return LLM(**args)
    except Exception as e:  # vLLM raises many types while starting (ValueError, RuntimeError, OSError)
        raise VLLMStartError(f"vLLM did not start for {location}: {type(e).__name__}: {e}") from e


def attach_vllm(roles: Any, cfg: RunConfig, *, shared: bool) -> Any:
    """``roles`` (built by ``hf_local.build_roles``) with vLLM policies in place of its policies.

    The learners are untouched; the trainer moves their weights to these policies. On CUDA the
    engines get their budgets from the plan of the GPU they share with the learners
    (:func:`local_budgets`), computed before the first one starts.
    """
    engine = cfg.engine
    device = pick_device(engine.device)
    dtype = pick_dtype(engine.dtype, device)
    in_process = device.type == "cpu"
    coder_location = model_location(engine.coder_model, engine.cache_dir)
    two_engines = engine.mode == "separate" and not shared
    tester_location = model_location(engine.role_model("tester"), engine.cache_dir) if two_engines else ""
    budgets: list[EngineBudget | None] = [None, None]
    if not in_process:
        locations = {"coder": coder_location, "tester": tester_location or coder_location}
        budgets = [*local_budgets(cfg, locations, dtype, shared=shared), None]

    def policy(rollout: VLLMRollout, hf_policy: Any, role: str) -> VLLMPolicy:
        return VLLMPolicy(rollout, hf_policy.tokenizer, sorted(hf_policy.eos_ids), role)

    sleeps = not in_process  # CUDA: beside the learners on one GPU, asleep while they compute
    if engine.mode == "adapters":
        peft_model = roles.coder_learner.weights.peft_model
        rollout = VLLMRollout(
            start_engine(cfg, coder_location, dtype, in_process, budget=budgets[0], sleep_mode=sleeps),
            in_process=in_process,
            base=base_weights(peft_model),
            lora_scale=engine.lora_scale,
            sleeps=sleeps,
        )
        if in_process:  # the engine's frozen embedding and head become the learners' (no copy)
            rollout.llm.collective_rpc(
                share_frozen_tensors, kwargs={"base": rollout.base, "adapted": adapted_weights(peft_model)}
            )
            release_free_heap()
        coder = policy(rollout, roles.coder_policy, "coder")
        tester = coder if shared else policy(rollout, roles.tester_policy, "tester")
    else:
        coder_engine = start_engine(
            cfg, coder_location, dtype, in_process, budget=budgets[0], sleep_mode=sleeps
        )
        coder_rollout = VLLMRollout(coder_engine, in_process=in_process, sleeps=sleeps)
        coder = policy(coder_rollout, roles.coder_policy, "coder")
        if shared:
            tester = coder
        else:
            tester_engine = start_engine(
                cfg, tester_location, dtype, in_process, budget=budgets[1], sleep_mode=sleeps
            )
            tester_rollout = VLLMRollout(tester_engine, in_process=in_process, sleeps=sleeps)
            tester = policy(tester_rollout, roles.tester_policy, "tester")
    if sleeps:
        sleep_before_learners(roles, [coder.rollout, tester.rollout])
    return dataclasses.replace(roles, coder_policy=coder, tester_policy=tester)


def sleep_before_learners(roles: Any, rollouts: Sequence[VLLMRollout]) -> None:
    """Make every learner of ``roles`` put the engines of ``rollouts`` to sleep before it computes
    (its ``before_work`` hooks), each engine and learner once."""
    engines = list({id(r): r for r in rollouts}.values())
    learners = {id(x): x for x in (roles.coder_learner, roles.tester_learner)}
    for learner in learners.values():
        learner.before_work.extend(r.sleeper.sleep for r in engines)
