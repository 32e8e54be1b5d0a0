"""The Ray backend's session and placement on a local 2-CPU cluster: a failed call reports an actor's
death rather than its echo in a peer, and a local cluster too small for a run fails at once."""

from __future__ import annotations

import gc
import os
import signal
import socket
import time

import pytest

ray = pytest.importorskip("ray", reason="the Ray backend needs the ray extra")

from codea1.config import ClusterConfig  # noqa: E402
from codea1.engine.base import EngineFailure  # noqa: E402
from codea1.engine.ray_cluster.placement import plan, reserve  # noqa: E402
from codea1.engine.ray_cluster.session import (  # noqa: E402
    RayUnavailable,
    check_reachable,
    gather,
    starts_local_cluster,
)


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


def rank_actor() -> type:
    """A stand-in for a learner rank (one dies, its peer fails in a collective a moment later),
    defined here so that Ray ships it by value to workers that cannot import the tests."""

    class Rank:
        def pid(self) -> int:
            return os.getpid()

        def wait(self) -> None:
            time.sleep(60)

        def lose_peer(self, pid: int) -> None:
            os.kill(pid, signal.SIGKILL)
            self.fail()

        def fail(self, delay_s: float = 0.0) -> None:
            time.sleep(delay_s)
            raise RuntimeError("Connection closed by peer [127.0.0.1]:8099")

    return ray.remote(num_cpus=0)(Rank)


@pytest.mark.parametrize("victim_as", ["ref", "peer"])
def test_a_failed_call_names_the_actor_death_behind_it(cluster, victim_as: str) -> None:
    # "peer": the dead rank's result is not fetched (rank 0's gathered weights stay in the store)
    rank = rank_actor()
    survivor, victim = rank.remote(), rank.remote()
    pid = ray.get(victim.pid.remote())
    failing, dead = survivor.lose_peer.remote(pid), victim.wait.remote()
    refs, peers = ([failing, dead], []) if victim_as == "ref" else ([failing], [dead])
    with pytest.raises(EngineFailure) as failure:
        gather(refs, "coder learner group", peers=peers)
    message = str(failure.value)
    assert message.startswith("coder learner group: an actor died (") and "\n" not in message
    assert "Connection closed" not in message


def test_the_other_errors_of_a_failed_call_are_read_not_printed_at_exit(cluster, monkeypatch) -> None:
    unread: list[Exception] = []  # what Ray would log as "Unhandled error", with the remote traceback
    monkeypatch.setattr(ray._private.worker, "_unhandled_error_handler", unread.append)
    rank = rank_actor()
    survivor, victim = rank.remote(), rank.remote()
    os.kill(ray.get(victim.pid.remote()), signal.SIGKILL)
    time.sleep(1.0)  # known dead: its result fails first, the survivor's error comes a second later

    def failed_call() -> str:  # returns, so that nothing holds the call's refs afterwards
        try:
            gather([victim.wait.remote(), survivor.fail.remote(1.0)], "coder learner group")
        except EngineFailure as e:
            return str(e)
        return "no failure"

    assert "an actor died" in failed_call()
    gc.collect()
    time.sleep(2.0)
    assert unread == []


def test_an_error_without_a_death_keeps_its_own_line(cluster) -> None:
    rank = rank_actor()
    failing, waiting = rank.remote(), rank.remote()
    with pytest.raises(
        EngineFailure, match=r"^tester learner group: RuntimeError: Connection closed by peer"
    ):
        gather([failing.fail.remote(), waiting.wait.remote()], "tester learner group")


def test_a_local_cluster_too_small_for_the_run_fails_at_once(cluster) -> None:
    layout = plan(
        ClusterConfig(learner_workers=64, cpus_per_worker=1.0), ["coder", "tester"], ["coder", "tester"]
    )
    start = time.monotonic()
    with pytest.raises(RayUnavailable) as failure:
        reserve(layout, can_grow=False)
    assert time.monotonic() - start < 5
    assert str(failure.value).startswith("the cluster cannot place 130 actors needing 130 CPUs and 0 GPUs")
    assert "(it has 2 CPUs, 0 GPUs)" in str(failure.value) and "cluster.num_cpus" in str(failure.value)
    assert layout.group is None


def test_only_a_cluster_without_an_address_is_the_runs_own(monkeypatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert starts_local_cluster(ClusterConfig())
    assert not starts_local_cluster(ClusterConfig(address="auto"))
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert not starts_local_cluster(ClusterConfig())


def test_an_unreachable_cluster_address_fails_at_once_in_one_line() -> None:
    """Ray retries a dead address for minutes; the run asks the port itself first."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(RayUnavailable, match="cannot reach the Ray cluster") as e:
            check_reachable(address, timeout_s=5.0)
        assert "\n" not in str(e.value)
    check_reachable("auto")  # left to Ray
