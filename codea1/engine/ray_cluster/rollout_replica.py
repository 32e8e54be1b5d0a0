"""One rollout replica: a Ray actor holding a sampling engine for one or both roles.

A replica of a ``separate``-mode role holds that role's model; in ``adapters`` mode and in
self-play one replica group serves both roles from one base (the adapters are merged in at a role
switch, as in the local engines). The engine is vLLM (``engine.rollout: vllm``) or transformers
``generate``; weights arrive through the same ``load_weights`` / ``load_adapter`` seam as a local
policy's, from the object store, or, with vLLM's ``nccl`` / ``ipc`` weight-transfer backends (CUDA,
``ray_cluster.transfer``; not yet run on a GPU), straight from the learner ranks, which drive this
replica's vLLM weight-transfer methods. A vLLM replica loads no weights of its own: the engine reads them,
the eos ids come from the model's generation config, and the frozen base of ``adapters`` mode is
kept on the CPU; on CUDA the engine starts with the budget of its GPU's plan
(``vllm_local.roles.replica_budget``). The engine starts in the replica actor's own process
(``vllm_local.roles.start_engine``), which with ``ipc`` sets ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``
there first (``roles.IPC_ENVIRONMENT``): the learner rank's CUDA-IPC handles reach the replica through
Ray, then its engine core through vLLM's msgpack RPC.

Imports: torch, transformers (generation config), config, engine.base, engine.hf_local,
engine.vllm_local, engine.loading, this package's transfer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import torch

from codea1.config import RunConfig, with_values
from codea1.engine.base import Completion, SamplingParams
from codea1.engine.hf_local.policy import eos_ids
from codea1.engine.loading import (
    load_model_and_tokenizer,
    load_tokenizer,
    model_location,
    pick_device,
    pick_dtype,
)


def config_eos_ids(location: str, tokenizer: Any) -> list[int]:
    """The ids a completion stops at, as :func:`~codea1.engine.hf_local.policy.eos_ids` reads them
    from a loaded model, from the model's ``generation_config.json`` alone (no weights loaded);
    without that file, the generation config transformers derives from the model's config."""
    from transformers import AutoConfig, GenerationConfig

    try:
        generation = GenerationConfig.from_pretrained(location)
    except OSError:  # no generation_config.json: what from_pretrained falls back to
        generation = GenerationConfig.from_model_config(AutoConfig.from_pretrained(location))
    return sorted(eos_ids(SimpleNamespace(generation_config=generation), tokenizer))


class RolloutReplica:
    """The body of a rollout replica (wrapped with ``ray.remote`` by the rollout group)."""

    def __init__(self, cfg: RunConfig, spec: str, roles: Sequence[str], engine: str) -> None:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        cuda = cfg.cluster.gpus_per_worker > 0 and torch.cuda.is_available()
        cfg = with_values(cfg, {"engine.device": "cuda" if cuda else "cpu"})  # this replica's device
        self.policies: dict[str, Any] = {}
        self.sleeps = False
        self.backend = ""
        """The engine's weight-transfer backend (vLLM only; ``transfer.replica_backend``)."""
        if engine == "vllm":
            self.rollout = self._start_vllm(cfg, spec, roles)
            return
        from codea1.engine.hf_local import HFPolicy
        from codea1.engine.hf_local.weights import MergedAdapterRollout, ModuleRollout

        model, tokenizer = load_model_and_tokenizer(
            spec, cfg.engine.dtype, cfg.engine.device, cfg.engine.cache_dir
        )
        model.requires_grad_(False)
        if cfg.engine.mode == "adapters":
            base = {n: p.detach().clone() for n, p in model.named_parameters()}
            rollout: Any = MergedAdapterRollout(model, base, cfg.engine.lora_scale)
        else:
            rollout = ModuleRollout(model)
        batch = cfg.coder.sampling.batch_size
        self.policies = {r: HFPolicy(rollout, tokenizer, batch, r) for r in roles}
        self.rollout = rollout

    def _start_vllm(self, cfg: RunConfig, spec: str, roles: Sequence[str]) -> Any:
        """Start the vLLM engine and the roles' policies on it; returns its ``VLLMRollout``."""
        from codea1.engine.ray_cluster.transfer import replica_backend
        from codea1.engine.vllm_local.policy import VLLMPolicy, VLLMRollout
        from codea1.engine.vllm_local.roles import replica_budget, start_engine

        device = pick_device(cfg.engine.device)
        dtype = pick_dtype(cfg.engine.dtype, device)
        cpu = device.type == "cpu"
        location = model_location(spec, cfg.engine.cache_dir)
        tokenizer = load_tokenizer(location)
        base = None
        if cfg.engine.mode == "adapters":  # the frozen base the adapters merge into, on the CPU
            name = "bfloat16" if dtype == torch.bfloat16 else "float32"
            model, _ = load_model_and_tokenizer(spec, name, "cpu", cfg.engine.cache_dir)
            base = {n: p.detach() for n, p in model.requires_grad_(False).named_parameters()}
        # colocated with learner ranks on a GPU: free the GPU while they update
        self.sleeps = cfg.cluster.placement == "colocate" and not cpu
        budget = None if cpu else replica_budget(cfg, roles, location, dtype)
        self.backend = replica_backend(cfg, cuda=not cpu)
        llm = start_engine(
            cfg, location, dtype, in_process=cpu, sleep_mode=self.sleeps, budget=budget,
            transfer_backend=self.backend,
        )  # fmt: skip
        rollout = VLLMRollout(
            llm, in_process=cpu, base=base, lora_scale=cfg.engine.lora_scale, sleeps=self.sleeps
        )
        eos = config_eos_ids(location, tokenizer)
        self.policies = {r: VLLMPolicy(rollout, tokenizer, eos, r) for r in roles}
        return rollout

    def close(self) -> None:
        """Stop a vLLM engine cleanly before the actor is killed (``ray.kill`` alone leaves vLLM's
        rendezvous file in the replica's temporary directory); a transformers replica has nothing to stop."""
        close = getattr(self.rollout, "close", None)
        self.policies = {}
        if close is not None:
            close()

    def started(self) -> bool:
        """Whether the engine can sleep (see :meth:`sleep`); the constructor's errors surface here."""
        return self.sleeps

    def sleep(self) -> None:
        """Free the GPU memory of the engine (``LLM.sleep``: KV cache dropped, weights discarded in
        ``separate`` mode, level 2, or backed up in host memory in ``adapters`` mode, level 1) while
        colocated learner ranks update; vLLM on CUDA only (``sleep_mode``)."""
        self.rollout.sleeper.sleep()

    def wake(self) -> None:
        """Take the GPU memory back before sampling: the weights, then the KV cache. A weight sync
        wakes the weights alone first and the KV cache after (``VLLMRollout``)."""
        self.rollout.sleeper.wake()

    def generate(self, role: str, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        """Sample ``role``'s completions of this replica's prompts."""
        return self.policies[role].generate(prompts, params)

    def weight_transfer_backend(self) -> str:
        """The engine's weight-transfer backend (empty for a transformers replica)."""
        return self.backend

    # vLLM's weight-transfer control plane, driven by a learner rank (``transfer.ReplicaWeightSyncClient``)
    # when the backend is vLLM's ``nccl`` or ``ipc``; not yet run on a GPU.

    def init_weight_transfer_engine(self, request: Any) -> None:
        """Join the learner group's transfer (NCCL: the rendezvous with rank 0)."""
        self.rollout.llm.init_weight_transfer_engine(request)

    def start_weight_update(self) -> None:
        """Open an update round (the weights awake first, the KV cache still released)."""
        self.rollout.sleeper.wake_weights()
        self.rollout.llm.start_weight_update()

    def update_weights(self, request: Any) -> None:
        """Receive one chunk of the round."""
        self.rollout.llm.update_weights(request)

    def finish_weight_update(self) -> None:
        """Close the round; cached prompt KV was computed with the old weights."""
        self.rollout.llm.finish_weight_update()
        self.rollout.sleeper.loaded()  # vLLM's nccl / ipc rounds carry every weight (separate mode)
        self.rollout.llm.reset_prefix_cache()

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """Sample from these full weights from now on; returns what arrived (:func:`arrival`)."""
        start = time.perf_counter()
        self.rollout.load_weights(weights)
        return arrival(weights, time.perf_counter() - start)

    def load_adapter(self, role: str, weights: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """Sample ``role`` from the base plus these LoRA tensors from now on; returns what arrived."""
        start = time.perf_counter()
        self.rollout.load_adapter(role, weights)
        return arrival(weights, time.perf_counter() - start)


def arrival(weights: Mapping[str, torch.Tensor], seconds: float) -> dict[str, float]:
    """What one replica got in a sync: ``tensors``, ``bytes`` (as they came out of the object store)
    and ``seconds`` spent loading them into its engine (the fetch is not included)."""
    return {
        "tensors": float(len(weights)),
        "bytes": float(sum(t.numel() * t.element_size() for t in weights.values())),
        "seconds": seconds,
    }
