"""A role's learner group seen from the driver: one :class:`~codea1.engine.base.Learner` whose
work runs on ``cluster.learner_workers`` Ray actors (:class:`LearnerWorker`) forming one FSDP2
group.

A batch is cut into contiguous shares, one per rank; log-probs come back in batch order; an
update's statistics are merged as if one process had run it. ``named_weights`` leaves the gathered
weights in the Ray object store (:class:`RemoteWeights`), so a weight sync moves them from rank 0
to the replicas without passing through the driver. Colocated with replicas on CUDA (``offload``),
the ranks move their weights and AdamW state to host memory while the replicas sample
(:meth:`RayLearnerGroup.offload`, a ``before_wake`` hook of the replicas) and take them back
before they compute, after the ``before_work`` hooks have put the replicas to sleep.

Imports: ray (lazily), config, core.losses, engine.base, this package.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from codea1.config import OptimConfig, RunConfig
from codea1.core.losses import stats_weighting
from codea1.engine.base import LossFn, TrainBatch
from codea1.engine.ray_cluster.learner_worker import LearnerWorker
from codea1.engine.ray_cluster.placement import Layout
from codea1.engine.ray_cluster.session import gather, import_ray
from codea1.engine.ray_cluster.shares import merge_step_stats, spans
from codea1.engine.ray_cluster.transfer import DirectWeights, LazyWeights


class RemoteWeights(LazyWeights):
    """Weights held in the Ray object store; ``ref`` travels to actors, reading fetches them."""

    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def _load(self) -> Mapping[str, torch.Tensor]:
        return import_ray().get(self.ref)


class RayLearnerGroup:
    """The :class:`~codea1.engine.base.Learner` of one role over a group of Ray actors."""

    def __init__(
        self,
        cfg: RunConfig,
        role: str,
        layout: Layout,
        optim: OptimConfig,
        total_steps: int,
        *,
        shared: bool,
        offload: bool = False,
    ) -> None:
        ray = import_ray()
        self.role = role
        self.what = f"{role} learner group"
        self.adapter: str | None = role if cfg.engine.mode == "adapters" else None
        self.weighting = stats_weighting(cfg.loss.aggregation)
        self.last_stats: dict[str, float] = {}
        self.before_work: list[Callable[[], None]] = []
        self.transfer = ""
        """vLLM's backend toward the replicas once :meth:`connect`-ed (else the object store)."""
        """Called before the ranks compute or read their weights (``colocate``: put the replicas
        sharing their GPUs to sleep)."""
        self.offloaded = False
        world = cfg.cluster.learner_workers
        remote = ray.remote(LearnerWorker)
        self.workers = [
            remote.options(**layout.options(role, "learner", r)).remote(cfg, role, r, world, shared)
            for r in range(world)
        ]
        master = gather([self.workers[0].address.remote()], self.what)[0]
        gather([w.setup.remote(master, optim, total_steps) for w in self.workers], self.what)
        if offload:  # before the replicas sharing these GPUs start
            self.offload()

    def _work(self) -> None:
        for hook in self.before_work:
            hook()
        self.offloaded = False  # each rank takes its weights back before it computes

    def offload(self) -> None:
        """Move every rank's weights and AdamW state to host memory (ranks on CUDA that were set up
        with ``offload``; the others do nothing)."""
        if not self.offloaded:
            self.offloaded = any(gather([w.offload.remote() for w in self.workers], self.what))

    def _shares(self, batch: TrainBatch) -> list[TrainBatch]:
        return [batch.slice(lo, hi) for lo, hi in spans(len(batch), len(self.workers))]

    def logprobs(self, batch: TrainBatch, reference: bool = False) -> list[tuple[float, ...]]:
        """Per-token log-probs of the completions, computed by the ranks on their shares."""
        self._work()
        parts = gather(
            [w.logprobs.remote(s, reference) for w, s in zip(self.workers, self._shares(batch), strict=True)],
            self.what,
        )
        return [lp for part in parts for lp in part]

    def train_step(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step over ``batch``, each rank updating on its share."""
        self._work()
        shares = self._shares(batch)
        stats = gather(
            [w.train_step.remote(s, loss_fn) for w, s in zip(self.workers, shares, strict=True)], self.what
        )
        weights = [
            float(sum(len(c) for c in s.completion_ids)) if self.weighting == "tokens" else float(len(s))
            for s in shares
        ]
        self.last_stats = merge_step_stats(stats, weights)
        return self.last_stats

    def connect(self, replicas: list[Any], backend: str) -> None:
        """Send this role's weights to ``replicas`` (actor handles) with vLLM's ``backend`` (``nccl``
        or ``ipc``) from now on: every rank opens vLLM's trainer engine, rank 0 joins the replicas
        (``ray_cluster.transfer``). Not yet run on a GPU."""
        master = gather([self.workers[0].address.remote()], self.what)[0]
        world = 1 + len(replicas)
        gather([w.open_transfer.remote(backend, replicas, master, world) for w in self.workers], self.what)
        self.transfer = backend

    def push_weights(self) -> dict[str, float]:
        """One update round through the engine of :meth:`connect`; returns ``bytes`` and ``tensors``."""
        self._work()
        return gather([w.push_weights.remote() for w in self.workers], self.what)[0]

    def named_weights(self) -> Any:
        """The whole trainable tensors in the rollout dtype (full weights; LoRA tensors in their own):
        gathered by rank 0 and left in the object store (:class:`RemoteWeights`), or once
        :meth:`connect`-ed a :class:`~codea1.engine.ray_cluster.transfer.DirectWeights` that the
        replicas' policy pushes."""
        if self.transfer:
            return DirectWeights(self.push_weights, self.gathered)
        return self.gathered()

    def gathered(self) -> RemoteWeights:
        """The whole trainable tensors gathered by rank 0 into the object store."""
        self._work()
        refs = [w.named_weights.remote() for w in self.workers]
        # the other ranks took part in the gather; their failures surface here (rank 0's death too)
        gather(refs[1:], self.what, peers=refs[:1])
        import_ray().wait(refs[:1])
        return RemoteWeights(refs[0])

    def save(self, path: Path) -> None:
        """Every rank writes its part of ``path`` (a directory every node can reach)."""
        self._work()
        gather([w.save.remote(str(path)) for w in self.workers], self.what)

    def load(self, path: Path) -> None:
        """Every rank restores ``path`` (saved by any number of ranks or by the local backend)."""
        self._work()
        gather([w.load.remote(str(path)) for w in self.workers], self.what)

    def close(self) -> None:
        """Stop the group's actors."""
        ray = import_ray()
        for w in self.workers:
            ray.kill(w)
        self.workers = []
