"""The Ray backend's pure parts, no cluster needed: how bundles are laid out, how work is cut into
shares, and how the ranks' statistics merge."""

from __future__ import annotations

import pytest

from codea1.config import ClusterConfig
from codea1.engine.ray_cluster.placement import plan
from codea1.engine.ray_cluster.shares import merge_step_stats, spans


def test_split_gives_every_rank_and_replica_its_own_bundle() -> None:
    layout = plan(ClusterConfig(learner_workers=2, rollout_replicas=2, gpus_per_worker=1), ["coder", "tester"],
                  ["coder", "tester"])  # fmt: skip
    assert len(layout.bundles) == 8
    assert len(set(layout.slots.values())) == 8
    assert all(b == {"CPU": 1.0, "GPU": 1} for b in layout.bundles)


def test_colocate_puts_replica_i_on_learner_rank_is_bundle() -> None:
    cluster = ClusterConfig(learner_workers=2, rollout_replicas=3, placement="colocate", gpus_per_worker=1)
    layout = plan(cluster, ["coder", "tester"], ["coder", "tester"])
    assert layout.slots[("coder", "replica", 0)] == layout.slots[("coder", "learner", 0)]
    assert layout.slots[("tester", "replica", 1)] == layout.slots[("tester", "learner", 1)]
    assert layout.slots[("coder", "replica", 2)] not in {
        layout.slots[("coder", "learner", r)] for r in (0, 1)
    }
    assert len(layout.bundles) == 2 * 2 + 2  # the third replica of each role needs its own bundle
    # one replica group serving both roles (adapters mode) sits on the coder's ranks
    shared = plan(cluster, ["coder", "tester"], ["coder"])
    assert shared.slots[("coder", "replica", 1)] == shared.slots[("coder", "learner", 1)]
    # replicas alone (no learner group) still get bundles
    alone = plan(cluster, [], ["coder"])
    assert len(alone.bundles) == 3


@pytest.mark.parametrize(("count", "parts"), [(5, 2), (2, 3), (0, 2), (8, 4), (7, 1)])
def test_spans_cover_everything_once_in_order(count: int, parts: int) -> None:
    cut = spans(count, parts)
    assert len(cut) == parts
    assert [i for lo, hi in cut for i in range(lo, hi)] == list(range(count))
    sizes = [hi - lo for lo, hi in cut]
    assert max(sizes) - min(sizes) <= 1


def test_merged_stats_add_shares_and_weight_means() -> None:
    ranks = [
        {
            "loss": 0.25,
            "tokens": 30.0,
            "grad_norm": 2.0,
            "lr": 1e-5,
            "seconds": 3.0,
            "skipped": 0.0,
            "clipfrac": 0.1,
        },
        {
            "loss": 0.5,
            "tokens": 10.0,
            "grad_norm": 2.0,
            "lr": 1e-5,
            "seconds": 4.0,
            "skipped": 0.0,
            "clipfrac": 0.5,
        },
    ]
    merged = merge_step_stats(ranks, weights=[30.0, 10.0])
    assert merged["loss"] == pytest.approx(0.75) and merged["tokens"] == 40.0
    assert merged["grad_norm"] == 2.0 and merged["seconds"] == 4.0
    assert merged["clipfrac"] == pytest.approx((0.1 * 30 + 0.5 * 10) / 40)


def test_the_local_cluster_is_sized_to_the_layout_within_reason() -> None:
    from codea1.engine.ray_cluster.session import local_cluster_cpus

    separate = ClusterConfig()  # coder + tester learners and replicas: 4 one-CPU actors
    assert local_cluster_cpus(separate, 4.0, cores=2) == 4  # a 2-core laptop runs the demo layout
    assert local_cluster_cpus(separate, 1.0, cores=16) == 16  # never fewer than the cores
    assert local_cluster_cpus(ClusterConfig(num_cpus=3), 4.0, cores=2) == 3  # the user's number wins
    assert local_cluster_cpus(ClusterConfig(cpus_per_worker=8.0), 32.0, cores=2) == 2  # no actor fits
    assert local_cluster_cpus(separate, 130.0, cores=2) == 2  # 65 actors per core: refused by placement


def test_starting_a_local_cluster_hides_only_the_token_on_notice(caplog) -> None:
    import logging

    from codea1.engine.ray_cluster.session import TOKEN_SETUP_LOGGER, token_notice_hidden

    token_logger = logging.getLogger(TOKEN_SETUP_LOGGER)
    with caplog.at_level(logging.WARNING, logger=TOKEN_SETUP_LOGGER):
        with token_notice_hidden():
            token_logger.warning(
                "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=..."
            )
            token_logger.warning("Token authentication is disabled for this Ray cluster. Anyone with ...")
        token_logger.warning("Token authentication is enabled for this Ray cluster (after the start)")
    shown = [r.getMessage() for r in caplog.records]
    assert len(shown) == 2 and "disabled" in shown[0] and "after the start" in shown[1]
