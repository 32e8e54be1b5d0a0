"""Rollout replicas seen from the driver: one :class:`~codea1.engine.base.Policy` per role whose
sampling runs on ``cluster.rollout_replicas`` Ray actors.

A call's prompts are cut into contiguous shares, one per replica, each told where its share starts
(``SamplingParams.first_prompt``), so that per-request seeds — and with vLLM the completions — do
not depend on the number of replicas. Weights are put in the object store once (a learner group
leaves them there, full weights already in the rollout dtype) and every replica loads them from
there; each sync's seconds and bytes are measured (``RayPolicy.last_sync``). Colocated with learner
ranks on CUDA the replicas sleep while the ranks compute; before any replica wakes, the
``before_wake`` hooks run (the ranks move to host memory), then a sync wakes each replica's weights,
loads the new ones and wakes its KV cache, and a rollout wakes the replicas whole.

Imports: ray (lazily), config, engine.base, engine.loading, this package.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from codea1.config import RunConfig
from codea1.engine.base import ChatTemplatePrompts, Completion, EngineFailure, SamplingParams
from codea1.engine.loading import load_tokenizer, model_location
from codea1.engine.ray_cluster.learner_group import RemoteWeights
from codea1.engine.ray_cluster.placement import Layout
from codea1.engine.ray_cluster.rollout_replica import RolloutReplica
from codea1.engine.ray_cluster.session import gather, import_ray
from codea1.engine.ray_cluster.shares import spans
from codea1.engine.ray_cluster.transfer import DirectWeights

CLOSE_S = 60.0
"""Longest wait for the replicas' engines to shut down when the group closes."""


class ReplicaGroup:
    """The replicas of one model (one role, or both roles sharing a base)."""

    def __init__(
        self, cfg: RunConfig, name: str, spec: str, roles: Sequence[str], engine: str, layout: Layout
    ) -> None:
        ray = import_ray()
        self.what = f"{name} rollout replicas"
        remote = ray.remote(RolloutReplica)
        self.replicas = [
            remote.options(**layout.options(name, "replica", i)).remote(cfg, spec, list(roles), engine)
            for i in range(cfg.cluster.rollout_replicas)
        ]
        self.tokenizer = load_tokenizer(model_location(spec, cfg.engine.cache_dir))
        self.sync_seconds = 0.0
        self.sleeps = all(gather([r.started.remote() for r in self.replicas], self.what))
        self.asleep = False
        self.backends = set(gather([r.weight_transfer_backend.remote() for r in self.replicas], self.what))
        """The replicas' weight-transfer backends (one, or empty for transformers replicas)."""
        self.before_wake: list[Callable[[], None]] = []
        """Called before the replicas wake (``colocate``: offload the learner ranks sharing their GPUs)."""

    def sleep(self) -> None:
        """Free the replicas' GPU memory (only engines that can: vLLM on CUDA, colocated)."""
        if self.sleeps and not self.asleep:
            gather([r.sleep.remote() for r in self.replicas], self.what)
            self.asleep = True

    def wake(self) -> None:
        """Take the GPU memory back before sampling (the ``before_wake`` hooks first)."""
        if self.asleep:
            for hook in self.before_wake:
                hook()
            gather([r.wake.remote() for r in self.replicas], self.what)
            self.asleep = False

    def generate(
        self, role: str, prompts: Sequence[str], params: SamplingParams
    ) -> tuple[list[Completion], dict]:
        """Every replica samples its share; completions come back in prompt order."""
        self.wake()
        start = time.perf_counter()
        shares = [
            (r, lo, hi)
            for r, (lo, hi) in zip(self.replicas, spans(len(prompts), len(self.replicas)), strict=True)
            if hi > lo
        ]
        parts = gather(
            [
                r.generate.remote(role, list(prompts[lo:hi]), dataclasses.replace(params, first_prompt=lo))
                for r, lo, hi in shares
            ],
            self.what,
        )
        out: list[Completion] = []
        for (_, lo, _), completions in zip(shares, parts, strict=True):
            out.extend(dataclasses.replace(c, prompt_index=c.prompt_index + lo) for c in completions)
        seconds = time.perf_counter() - start
        new_tokens = sum(len(c.completion_ids) for c in out)
        stats = {
            "sequences": float(len(out)),
            "new_tokens": float(new_tokens),
            "seconds": seconds,
            "tokens_per_s": new_tokens / seconds if seconds > 0 else 0.0,
        }
        return out, stats

    def send(self, method: str, *args: Any, weights: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """Call ``method(*args, weights)`` on every replica with the weights put in the store once.

        Returns the sync's figures: ``seconds`` (wall clock, the replicas' fetches from the object
        store included), ``bytes`` and ``tensors`` one replica received, ``replicas``, and
        ``load_seconds`` of the slowest replica's load into its engine.
        """
        if isinstance(weights, DirectWeights):
            return self._push(weights)
        if self.asleep:  # each replica wakes its weights, loads, then wakes its KV cache
            for hook in self.before_wake:
                hook()
            self.asleep = False
        start = time.perf_counter()
        ref = weights.ref if isinstance(weights, RemoteWeights) else import_ray().put(dict(weights))
        arrived = gather([getattr(r, method).remote(*args, ref) for r in self.replicas], self.what)
        self.sync_seconds = time.perf_counter() - start
        return {
            "seconds": self.sync_seconds,
            "bytes": max((a["bytes"] for a in arrived), default=0.0),
            "tensors": max((a["tensors"] for a in arrived), default=0.0),
            "replicas": float(len(arrived)),
            "load_seconds": max((a["seconds"] for a in arrived), default=0.0),
        }

    def _push(self, weights: DirectWeights) -> dict[str, float]:
        """A sync by vLLM's ``nccl`` / ``ipc``, driven by the learner ranks (``weights.push``): the
        ranks hold their weights on the GPU (CUDA IPC shares them from there) while each replica
        wakes its weights alone (``RolloutReplica.start_weight_update``); then the ``before_wake``
        hooks move the colocated ranks off the GPU and the replicas take their KV cache back.
        Returns ``seconds`` (the push), ``bytes``, ``tensors`` and ``replicas``. Not yet run on a GPU."""
        start = time.perf_counter()
        pushed = weights.push()
        self.sync_seconds = time.perf_counter() - start
        if self.asleep:
            for hook in self.before_wake:
                hook()
            gather([r.wake.remote() for r in self.replicas], self.what)
            self.asleep = False
        return {**pushed, "seconds": self.sync_seconds, "replicas": float(len(self.replicas))}

    def close(self) -> None:
        """Stop the replicas: each engine shut down cleanly (at most :data:`CLOSE_S` seconds; a
        replica that is dead or does not answer is killed all the same), then the actors killed."""
        ray = import_ray()
        try:
            gather([r.close.remote() for r in self.replicas], self.what, CLOSE_S)
        except EngineFailure:
            pass  # a dead or stuck replica: killing it is all that is left
        for r in self.replicas:
            ray.kill(r)
        self.replicas = []


class RayPolicy(ChatTemplatePrompts):
    """The :class:`~codea1.engine.base.Policy` of one role on a :class:`ReplicaGroup`.

    ``last_stats`` has the latest ``generate``'s figures and, once weights have been sent,
    ``sync_seconds`` / ``sync_bytes`` of the latest sync; ``last_sync`` holds all of that sync's
    figures (:meth:`ReplicaGroup.send`).
    """

    def __init__(self, group: ReplicaGroup, role: str, engine: str) -> None:
        self.group, self.role, self.name = group, role, engine
        self.tokenizer = group.tokenizer
        self.last_stats: dict[str, float] = {}
        self.last_sync: dict[str, float] = {}

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        """Sample ``params.n`` completions per prompt across the replicas (prompt-major)."""
        out, stats = self.group.generate(self.role, prompts, params)
        self.last_stats = {**stats, **sync_stats(self.last_sync)}
        return out

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Every replica samples from these full weights from now on."""
        self._synced(self.group.send("load_weights", weights=weights))

    def load_adapter(self, role: str, weights: Mapping[str, torch.Tensor]) -> None:
        """Every replica samples ``role`` from the base plus these LoRA tensors from now on."""
        self._synced(self.group.send("load_adapter", role, weights=weights))

    def _synced(self, sync: dict[str, float]) -> None:
        self.last_sync = sync
        self.last_stats = {**self.last_stats, **sync_stats(sync)}


def sync_stats(sync: Mapping[str, float]) -> dict[str, float]:
    """The ``last_stats`` keys of one weight sync: ``sync_seconds`` and ``sync_bytes``."""
    return {"sync_seconds": float(sync["seconds"]), "sync_bytes": float(sync["bytes"])} if sync else {}
