"""One rollout replica: a Ray actor holding a sampling engine for one or both roles.

A replica of a ``separate``-mode role holds that role's model; in ``adapters`` mode and in
self-play one replica group serves both roles from one base (the adapters are merged in at a role
switch, as in the local engines). The engine is vLLM (``engine.rollout: vllm``) or transformers
``generate``; weights arrive through the same ``load_weights`` / ``load_adapter`` seam as a local
policy's, from the object store.

Imports: torch, config, engine.base, engine.hf_local, engine.vllm_local, engine.loading.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from codea1.config import RunConfig
from codea1.engine.base import Completion, SamplingParams
from codea1.engine.hf_local.policy import eos_ids
from codea1.engine.loading import load_model_and_tokenizer, model_location, pick_device, pick_dtype


class RolloutReplica:
    """The body of a rollout replica (wrapped with ``ray.remote`` by the rollout group)."""

    def __init__(self, cfg: RunConfig, spec: str, roles: Sequence[str], engine: str) -> None:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        cuda = cfg.cluster.gpus_per_worker > 0 and torch.cuda.is_available()
        cfg.engine.device = "cuda" if cuda else "cpu"
        adapters = cfg.engine.mode == "adapters"
        scale = cfg.engine.lora_scale
        model, tokenizer = load_model_and_tokenizer(
            spec, cfg.engine.dtype, cfg.engine.device, cfg.engine.cache_dir
        )
        model.requires_grad_(False)
        self.policies: dict[str, Any] = {}
        self.sleeps = False
        if engine == "vllm":
            from codea1.engine.vllm_local.policy import VLLMPolicy, VLLMRollout
            from codea1.engine.vllm_local.roles import start_engine

            device = pick_device(cfg.engine.device)
            # colocated with learner ranks on a GPU: free the GPU while they update
            self.sleeps = cfg.cluster.placement == "colocate" and device.type == "cuda"
            llm = start_engine(
                cfg, model_location(spec, cfg.engine.cache_dir), pick_dtype(cfg.engine.dtype, device),
                in_process=device.type == "cpu", sleep_mode=self.sleeps,
            )  # fmt: skip
            base = {n: p.detach() for n, p in model.named_parameters()} if adapters else None
            rollout: Any = VLLMRollout(llm, in_process=device.type == "cpu", base=base, lora_scale=scale)
            eos = sorted(eos_ids(model, tokenizer))
            if not adapters:
                del model  # the engine holds its own copy
            self.policies = {r: VLLMPolicy(rollout, tokenizer, eos, r) for r in roles}
        else:
            from codea1.engine.hf_local import HFPolicy
            from codea1.engine.hf_local.weights import MergedAdapterRollout, ModuleRollout

            if adapters:
                base = {n: p.detach().clone() for n, p in model.named_parameters()}
                rollout = MergedAdapterRollout(model, base, scale)
            else:
                rollout = ModuleRollout(model)
            batch = cfg.coder.sampling.batch_size
            self.policies = {r: HFPolicy(rollout, tokenizer, batch, r) for r in roles}
        self.rollout = rollout

    def started(self) -> bool:
        """Whether the engine can sleep (see :meth:`sleep`); the constructor's errors surface here."""
        return self.sleeps

    def sleep(self) -> None:
        """Free the GPU memory of the engine (weights to CPU, KV cache dropped) while colocated
        learner ranks update; vLLM on CUDA only."""
        self.rollout.llm.sleep(level=1)

    def wake(self) -> None:
        """Take the GPU memory back before sampling or loading weights."""
        self.rollout.llm.wake_up()

    def generate(self, role: str, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        """Sample ``role``'s completions of this replica's prompts."""
        return self.policies[role].generate(prompts, params)

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> int:
        """Sample from these full weights from now on; returns how many tensors arrived."""
        self.rollout.load_weights(weights)
        return len(weights)

    def load_adapter(self, role: str, weights: Mapping[str, torch.Tensor]) -> int:
        """Sample ``role`` from the base plus these LoRA tensors from now on."""
        self.rollout.load_adapter(role, weights)
        return len(weights)
