"""No Ray layout puts two ranks of vLLM's NCCL weight-transfer group on one GPU: a layout where the
weight sync would (``colocate`` with more replicas than learner ranks, whole-GPU-less ``split``) is
refused by the configuration with one line, and every other layout's NCCL group (learner rank 0 and
each replica of a role) sits on bundles of their own, each a whole GPU. No cluster needed."""

from __future__ import annotations

import itertools

import pytest

from codea1.config import ConfigError, load_config
from codea1.engine.ray_cluster.placement import plan
from codea1.engine.ray_cluster.transfer import replica_backend


def layout(placement: str, learners: int, replicas: int, gpus: float, rollout: str = "vllm") -> list[str]:
    return [
        f"cluster.placement={placement}", f"cluster.learner_workers={learners}",
        f"cluster.rollout_replicas={replicas}", f"cluster.gpus_per_worker={gpus}", f"engine.rollout={rollout}",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("placement", "learners", "replicas", "gpus"),
    list(itertools.product(["split", "colocate"], [1, 2, 4], [1, 2, 3, 4], [1, 0.5, 2])),
)
def test_no_layout_puts_two_nccl_ranks_on_one_gpu(
    placement: str, learners: int, replicas: int, gpus: float
) -> None:
    sets = layout(placement, learners, replicas, gpus)
    try:
        cfg = load_config("paper-7b-ray", sets)
    except ConfigError as e:
        assert "\n" not in str(e) and "NCCL" in str(e)
        refused = True
    else:
        refused = False
    if placement == "colocate" and replicas > learners or placement == "split" and gpus == 0.5:
        assert refused, sets
        return
    assert not refused, sets
    backend = replica_backend(cfg, cuda=True)
    c = cfg.cluster
    slots = plan(c, ["coder", "tester"], ["coder", "tester"]).slots
    for role in ("coder", "tester"):
        ranks = [
            slots[(role, "learner", 0)],
            *(slots[(role, "replica", i)] for i in range(c.rollout_replicas)),
        ]
        if backend == "nccl":  # one bundle each, each at least one whole GPU of its own
            assert len(set(ranks)) == len(ranks) and float(c.gpus_per_worker).is_integer(), sets
        else:  # CUDA IPC: replica i on learner rank i's GPU
            assert backend == "ipc" and all(
                slots[(role, "replica", i)] == slots[(role, "learner", i)] for i in range(c.rollout_replicas)
            )


def test_the_layouts_the_refusal_leaves_alone() -> None:
    """Transformers replicas, ``adapters`` mode (object store) and CPU clusters move no weights by NCCL
    between the learner ranks and the replicas, so they may put more replicas than ranks on GPUs."""
    load_config("paper-7b-ray", layout("colocate", 1, 2, 1, rollout="transformers"))
    load_config("paper-7b-ray", [*layout("colocate", 1, 2, 1), "engine.mode=adapters"])
    load_config("paper-7b-ray", layout("colocate", 1, 2, 0))
    with pytest.raises(ValueError, match="colocate with more replicas"):  # the engine side refuses too
        replica_backend(load_config("paper-7b-ray", layout("colocate", 1, 2, 0)), cuda=True)
