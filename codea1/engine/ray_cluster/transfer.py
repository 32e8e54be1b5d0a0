"""Weight sync on the Ray backend through vLLM's weight-transfer API: which backend, and its client.

A vLLM replica's engine is started with the backend of :func:`replica_backend`. With
``codea1_buckets`` (CPU clusters; ``adapters`` mode, whose replicas merge the adapters into a base
they hold on the host) the learner group leaves the gathered weights in the object store and each
replica loads them into its engine through its own ``VLLMRollout`` (``vllm_local.transfer``). With
vLLM's ``nccl`` (``split``) or ``ipc`` (``colocate``, every replica beside a learner rank) the
learner ranks drive the transfer themselves (``LearnerWorker.open_transfer`` / ``push_weights``):
vLLM's trainer engine on every rank (FSDP gathers are collectives), rank 0 the sender, whose
client is :class:`ReplicaWeightSyncClient` over the replica actors. The driver only starts the
round: the group's ``named_weights`` returns :class:`DirectWeights`, which the replicas' policy
recognises and pushes.

vLLM's dense NCCL trainer engine puts every worker at ``rank_offset`` 1, for one engine; codea1's
replicas are independent engines (one worker each, TP 1), so the client gives replica ``i``
``rank_offset`` ``1 + i`` in one group of ``1 + replicas`` ranks: one broadcast reaches them all.

**The ``nccl`` and ``ipc`` paths have not run on a GPU yet**: they are written against vLLM 0.32's
source and tested with fakes (tests/cluster/test_weight_transfer_selection.py, docs/cluster.md).

Imports: ray and vllm (lazily), config, engine.vllm_local.weight_sync.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from codea1.config import RunConfig
from codea1.engine.vllm_local.weight_sync import DIRECT_BACKENDS, select_backend


def replica_backend(cfg: RunConfig, *, cuda: bool) -> str:
    """The weight-transfer backend of a vLLM rollout replica of this run (``cuda``: the replica's
    engine runs on a GPU)."""
    cluster = cfg.cluster
    return select_backend(
        cuda=cuda,
        placement=cluster.placement,
        full_weights=cfg.engine.mode == "separate",
        learner_on_every_gpu=cluster.rollout_replicas <= cluster.learner_workers,
    )


def direct_backend(backends: set[str]) -> str:
    """vLLM's backend the learner ranks drive toward a replica group (``nccl`` / ``ipc``), or "" when
    its replicas load from the object store (``codea1_buckets``, transformers replicas)."""
    if len(backends) == 1 and next(iter(backends)) in DIRECT_BACKENDS:
        return next(iter(backends))
    return ""


class ReplicaWeightSyncClient:
    """vLLM's ``VLLMWeightSyncClient`` (structural) over rollout-replica actors, as vLLM's
    ``RayVLLMWeightSyncClient``: each call fans out to every replica and waits for all. An NCCL
    init payload (it has ``rank_offset``) gives replica ``i`` the ranks after those of replicas
    ``0..i-1`` (``workers_per_replica`` each)."""

    def __init__(self, handles: list[Any], workers_per_replica: int = 1) -> None:
        self.handles = handles
        self.workers_per_replica = workers_per_replica

    def _all(self, call: Callable[[Any], Any]) -> None:
        import ray

        ray.get([call(h) for h in self.handles])

    def init_payloads(self, init_info: dict[str, Any]) -> list[dict[str, Any]]:
        """Each replica's init info: ``init_info`` itself, with its own ``rank_offset`` under NCCL."""
        if "rank_offset" not in init_info:
            return [dict(init_info) for _ in self.handles]
        first = int(init_info["rank_offset"])
        return [
            {**init_info, "rank_offset": first + i * self.workers_per_replica}
            for i in range(len(self.handles))
        ]

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        """Every replica joins (NCCL: all at once, since the rendezvous waits for every rank)."""
        import ray
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

        payloads = self.init_payloads(init_info)
        ray.get(
            [
                h.init_weight_transfer_engine.remote(WeightTransferInitRequest(init_info=p))
                for h, p in zip(self.handles, payloads, strict=True)
            ]
        )

    def start_weight_update(self) -> None:
        """Open an update round on every replica."""
        self._all(lambda h: h.start_weight_update.remote())

    def update_weights(self, update_info: Any) -> None:
        """One chunk to every replica (NCCL: they receive inside the broadcast)."""
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        request = WeightTransferUpdateRequest(update_info=update_info)
        self._all(lambda h: h.update_weights.remote(request))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        """Close the round on every replica."""
        self._all(lambda h: h.finish_weight_update.remote())


class LazyWeights(Mapping[str, torch.Tensor]):
    """Weights read as a mapping, loaded by :meth:`_load` on first use and kept."""

    _local: Mapping[str, torch.Tensor] | None = None

    def _load(self) -> Mapping[str, torch.Tensor]:
        raise NotImplementedError

    def _fetch(self) -> Mapping[str, torch.Tensor]:
        if self._local is None:
            self._local = self._load()
        return self._local

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._fetch()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fetch())

    def __len__(self) -> int:
        return len(self._fetch())


class DirectWeights(LazyWeights):
    """What a learner group connected to its replicas by ``nccl`` / ``ipc`` hands the trainer as its
    ``named_weights``: ``push()`` makes the ranks send (returns the sync's figures). Reading it as a
    mapping gathers the weights through the object store instead (``gather``), as before."""

    def __init__(
        self, push: Callable[[], dict[str, float]], gather: Callable[[], Mapping[str, torch.Tensor]]
    ) -> None:
        self.push = push
        self._load = gather  # type: ignore[method-assign]
