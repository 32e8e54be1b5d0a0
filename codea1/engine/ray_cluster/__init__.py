"""The Ray backend (``engine.backend: ray``): the driver's trainer reaches learner groups and rollout
replicas running as Ray actors through the same ``Policy`` / ``Learner`` seam as the local engines.

:func:`build_ray_roles` joins (or starts) the cluster, reserves one placement group for the run
(``placement.py``), starts a learner group per trained role (``learner_group.py``: FSDP2 ranks,
``learner_worker.py``) and a replica group per sampled model (``rollout_group.py``,
``rollout_replica.py``). With ``placement: colocate`` and vLLM replicas, a role's replicas sleep
while its ranks compute and its ranks move to host memory while the replicas sample (on CUDA;
docs/cluster.md, "On one 8-GPU node"). docs/cluster.md describes the layout; only ``engine.build``
imports this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codea1.config import RunConfig
from codea1.engine.ray_cluster.learner_group import RayLearnerGroup, RemoteWeights
from codea1.engine.ray_cluster.placement import Layout, plan, reserve
from codea1.engine.ray_cluster.rollout_group import RayPolicy, ReplicaGroup
from codea1.engine.ray_cluster.session import RayUnavailable, connect, gather, starts_local_cluster
from codea1.engine.ray_cluster.transfer import direct_backend

__all__ = [
    "RayLearnerGroup",
    "RayPolicy",
    "RayRoles",
    "RayUnavailable",
    "RemoteWeights",
    "build_ray_roles",
    "gather",
]


@dataclass
class RayRoles:
    """The two roles on the cluster (with one shared model, the tester's are the coder's): a
    :class:`~codea1.engine.base.Roles`."""

    coder_policy: RayPolicy
    coder_learner: RayLearnerGroup
    tester_policy: RayPolicy
    tester_learner: RayLearnerGroup
    tokenizer: Any
    layout: Layout
    replica_groups: list[ReplicaGroup]
    updates_overlap: bool = False
    """``split`` placement with a learner group per role: their updates and pushes use disjoint
    bundles, so the trainer runs them side by side."""

    def close(self) -> None:
        """Stop every actor and give the placement group back (the cluster itself stays)."""
        learners = {id(x): x for x in (self.coder_learner, self.tester_learner)}
        for learner in learners.values():
            learner.close()
        for group in self.replica_groups:
            group.close()
        self.layout.remove()


def build_ray_roles(cfg: RunConfig, *, rollout: str, shared: bool, schedules: dict[str, Any]) -> RayRoles:
    """Start the run's actors. ``rollout`` is the sampling engine (``vllm`` or ``transformers``),
    ``schedules`` maps each trained role to ``(optim config, total optimizer steps)``.
    Raises :class:`RayUnavailable` (no Ray, no cluster, too few resources)."""
    roles = ["coder"] if shared else ["coder", "tester"]
    adapters = cfg.engine.mode == "adapters"
    # which replica group samples each role: one per model (both roles share one base in adapters mode)
    replica_roles = {"coder": ["coder", "tester"]} if shared or adapters else {r: [r] for r in roles}
    planned = plan(cfg.cluster, roles, list(replica_roles))
    connect(cfg.cluster, layout_cpus=sum(b["CPU"] for b in planned.bundles))
    layout = reserve(planned, can_grow=not starts_local_cluster(cfg.cluster))
    learners: dict[str, RayLearnerGroup] = {}
    groups: list[ReplicaGroup] = []
    colocate = cfg.cluster.placement == "colocate"
    try:
        for role in roles:
            optim, total = schedules[role]
            offload = colocate and rollout == "vllm" and role in replica_roles  # shares its GPUs
            learners[role] = RayLearnerGroup(cfg, role, layout, optim, total, shared=shared, offload=offload)
        policies: dict[str, RayPolicy] = {}
        for name, served in replica_roles.items():
            group = ReplicaGroup(cfg, name, cfg.engine.role_model(name), served, rollout, layout)
            groups.append(group)
            policies.update({r: RayPolicy(group, r, rollout) for r in served})
            direct = direct_backend(group.backends)
            if direct and name in learners:  # vLLM's nccl / ipc from the learner ranks (not yet run on a GPU)
                learners[name].connect(group.replicas, direct)
            if colocate and name in learners:  # they share these bundles
                learners[name].before_work.append(group.sleep)
                group.before_wake.append(learners[name].offload)
    except BaseException:
        for learner in learners.values():
            learner.close()
        for group in groups:
            group.close()
        layout.remove()
        raise
    tester = "coder" if shared else "tester"
    return RayRoles(
        policies["coder"], learners["coder"], policies[tester], learners[tester],
        groups[0].tokenizer, layout, groups, updates_overlap=not shared and cfg.cluster.placement == "split",
    )  # fmt: skip
