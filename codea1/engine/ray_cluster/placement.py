"""Where each actor of the Ray backend runs: one placement group for the run, one bundle per
learner rank and rollout replica.

``split`` (the paper's layout) gives every learner rank and every replica a bundle of its own
(``cluster.cpus_per_worker`` CPUs, ``cluster.gpus_per_worker`` GPUs). ``colocate`` gives a role's
learner rank ``i`` and replica ``i`` one shared bundle, each actor taking half of it, so that
sampling and updates time-share the same devices.

Imports: ray (lazily), config, this package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from codea1.config import ClusterConfig
from codea1.engine.ray_cluster.session import RayUnavailable, import_ray

READY_TIMEOUT_S = 120.0


@dataclass
class Layout:
    """Bundle index of each (group, kind, index) and the placement group holding the bundles."""

    cluster: ClusterConfig
    group: Any = None
    bundles: list[dict[str, float]] = field(default_factory=list)
    slots: dict[tuple[str, str, int], int] = field(default_factory=dict)

    def options(self, group: str, kind: str, index: int) -> dict[str, Any]:
        """``Actor.options(...)`` for learner rank / replica ``index`` of ``group``."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        share = 0.5 if self.cluster.placement == "colocate" else 1.0
        bundle = self.slots[(group, kind, index)]
        return {
            "num_cpus": self.cluster.cpus_per_worker * share,
            "num_gpus": self.cluster.gpus_per_worker * share,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=self.group, placement_group_bundle_index=bundle
            ),
        }

    def remove(self) -> None:
        """Give the bundles back to the cluster."""
        if self.group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.group)
            self.group = None


def plan(cluster: ClusterConfig, learner_groups: list[str], rollout_groups: list[str]) -> Layout:
    """The bundles of a run (nothing is reserved yet: see :func:`reserve`)."""
    layout = Layout(cluster)
    bundle = {"CPU": cluster.cpus_per_worker}
    if cluster.gpus_per_worker:
        bundle["GPU"] = cluster.gpus_per_worker

    def add() -> int:
        layout.bundles.append(dict(bundle))
        return len(layout.bundles) - 1

    for g in learner_groups:
        for rank in range(cluster.learner_workers):
            layout.slots[(g, "learner", rank)] = add()
    for g in rollout_groups:
        for i in range(cluster.rollout_replicas):
            host = g if g in learner_groups else next(iter(learner_groups), None)
            shared = layout.slots.get((host, "learner", i)) if host else None
            colocated = cluster.placement == "colocate" and shared is not None
            layout.slots[(g, "replica", i)] = shared if colocated else add()
    return layout


def reserve(layout: Layout, *, can_grow: bool = True) -> Layout:
    """Create the placement group and wait until every bundle is placed; a cluster too small for
    it is a :class:`RayUnavailable` that says what was asked and what the cluster has.

    A cluster that ``can_grow`` (nodes may join, an autoscaler may add them) is given
    :data:`READY_TIMEOUT_S`; one that cannot (the local cluster a run starts) fails at once when
    the request exceeds its resources."""
    ray = import_ray()
    from ray.util.placement_group import placement_group

    need = {key: sum(b.get(key, 0.0) for b in layout.bundles) for key in ("CPU", "GPU")}
    if not can_grow and _exceeds(need, ray.cluster_resources()):
        raise RayUnavailable(_too_small(layout, need, ray.cluster_resources(), can_grow))
    layout.group = placement_group(layout.bundles, strategy="PACK")
    ready, _ = ray.wait([layout.group.ready()], timeout=READY_TIMEOUT_S)
    if not ready:
        layout.remove()
        raise RayUnavailable(_too_small(layout, need, ray.cluster_resources(), can_grow))
    return layout


def _exceeds(need: dict[str, float], have: dict[str, float]) -> bool:
    return any(amount > have.get(key, 0.0) + 1e-9 for key, amount in need.items())


def _too_small(layout: Layout, need: dict[str, float], have: dict[str, float], can_grow: bool) -> str:
    short_of_cpus = need["CPU"] > have.get("CPU", 0.0) + 1e-9
    more = "" if can_grow or not short_of_cpus else ", or give the local cluster more with cluster.num_cpus"
    return (
        f"the cluster cannot place {len(layout.bundles)} actors needing {need['CPU']:g} CPUs and "
        f"{need['GPU']:g} GPUs (it has {have.get('CPU', 0):g} CPUs, {have.get('GPU', 0):g} GPUs); lower "
        f"cluster.learner_workers, cluster.rollout_replicas or cluster.cpus_per_worker/gpus_per_worker{more}"
    )
