"""ClusterSandbox: the execution grid fanned out over Ray node actors gives the local pool's verdicts."""

from __future__ import annotations

import _thread
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from codea1.config import SandboxConfig
from codea1.sandbox import Sandbox, grid
from codea1.sandbox import cluster as cluster_module
from codea1.sandbox.attacks import FORGE_ATTACKS, run_suite
from codea1.sandbox.cluster import RAY_MISSING, ClusterSandbox, lane_sizes
from codea1.sandbox.executor import SandboxUnavailable, WorkerFailure
from codea1.sandbox.tasks import ProgramTask
from codea1.types import CheckJob, ExecGrid, GridJob, TestCase, Verdict

Expected = tuple[list[ExecGrid], list[Verdict]]

CFG = SandboxConfig(test_cpu_s=0.3, load_cpu_s=1.0)
REF = "def f(x):\n    return x * 2\n"
LOOP = "def f(x):\n    while True:\n        pass\n"
HARNESS = "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(-1) == -2\n"


def _job(job_id: str, codes: tuple[str, ...], tests: tuple[tuple[str, str], ...]) -> GridJob:
    return GridJob(job_id, REF, "f", codes, tuple(TestCase(c, p) for c, p in tests))


JOBS = [
    _job(
        "mixed",
        (
            REF,
            "def f(x):\n    return x + 2\n",  # fails some tests
            "def f(x):\n    raise KeyError(x)\n",  # errors
            "def g(x):\n    return 1\n",  # no entry point: does not load
            LOOP,  # times out
            "def f(x):\n    return bytearray(1 << 40)\n",  # memory
            "while True:\n    pass\n",  # times out while loading
        ),
        (("f(2)", "4"), ("f(3)", "7"), ("f('a')", "'aa'"), ("f(None)", "0"), ("f(2)", "[][1]")),
    ),
    # 150 tests: the reference's 300 expressions and each code's 150 calls are several tasks each
    _job(
        "many",
        (REF, "def f(x):\n    return x * 2 if x < 100 else 0\n", "def f(x):\n    return float(2 * x)\n"),
        tuple((f"f({i})", str(2 * i if i % 7 else i)) for i in range(150)),
    ),
    *(
        _job(f"small{k}", (REF, f"def f(x):\n    return x * 2 + {k % 2}\n"), (("f(1)", "2"),))
        for k in range(4)
    ),
]
CHECKS = [
    CheckJob("ok", REF, "f", HARNESS, cpu_s=1.0),
    CheckJob("bad", "def f(x):\n    return x + 2\n", "f", HARNESS, cpu_s=1.0),
    CheckJob("slow", LOOP, "f", HARNESS, cpu_s=0.3),
    CheckJob("noload", "def f(x)\n", "f", HARNESS, cpu_s=1.0),
]


@pytest.fixture(scope="module")
def ray() -> Iterator[Any]:
    ray = pytest.importorskip("ray", reason="the sandbox fan-out needs ray (pip install 'codea1[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 << 20)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def local() -> Expected:
    """The local pool's grids and check verdicts: what the fan-out must reproduce."""
    with Sandbox(SandboxConfig(workers=2, test_cpu_s=0.3, load_cpu_s=1.0)) as sandbox:
        return sandbox.run_grids(JOBS), sandbox.run_checks(CHECKS)


@pytest.fixture(scope="module")
def cluster(ray: Any) -> Iterator[ClusterSandbox]:
    with ClusterSandbox(CFG, 8) as sandbox:
        yield sandbox


def test_the_jobs_make_several_batches() -> None:
    assert len(grid.plan_oracle(JOBS, CFG).tasks) >= 5  # one reference, its 300+ expressions in chunks
    assert lane_sizes(2, 8) == [2] and lane_sizes(16, 8) == [8, 8] and lane_sizes(20, 8) == [7, 7, 6]
    assert lane_sizes(2, 1) == [1, 1]


def test_layers_are_those_of_the_node(cluster: ClusterSandbox) -> None:
    with Sandbox(SandboxConfig(workers=1)) as sandbox:
        assert cluster.layers() == sandbox.layers()
    assert list(cluster.node_workers().values()) == [2]


def test_grids_equal_the_local_pool(cluster: ClusterSandbox, local: Expected) -> None:
    grids = cluster.run_grids(JOBS)
    assert grids == local[0]
    mixed = [[v.status for v in row] for row in grids[0].verdicts]
    assert mixed[:3] == [
        ["pass", "pass", "pass", "invalid", "pass"],
        ["pass", "fail", "error", "invalid", "pass"],
        ["error", "error", "error", "invalid", "error"],
    ]
    assert mixed[4][0] == "timeout" and mixed[5][0] == "memory"
    statuses = [c.status for c in grids[0].code_status]
    assert statuses == ["pass", "pass", "pass", "error", "pass", "pass", "timeout"]
    assert [sum(v.status == "pass" for v in row) for row in grids[1].verdicts] == [150, 100, 150]


def test_checks_equal_the_local_pool(cluster: ClusterSandbox, local: Expected) -> None:
    verdicts = cluster.run_checks(CHECKS)
    assert verdicts == local[1]
    assert [v.status for v in verdicts] == ["pass", "fail", "timeout", "error"]


@pytest.mark.parametrize("batch", [1, 1000])
def test_any_batch_size_gives_the_same_grids(ray: Any, local: Expected, batch: int) -> None:
    with ClusterSandbox(CFG, batch) as sandbox:
        assert sandbox.run_grids(JOBS) == local[0]


def test_forged_records_are_contained(cluster: ClusterSandbox) -> None:
    attacks = FORGE_ATTACKS[:2]
    results = run_suite(cluster, attacks, harness_attacks=attacks)
    escaped = [f"{r.name}: {r.detail} [{r.verdicts}]" for r in results if not r.contained]
    assert not escaped, "\n".join(escaped)
    names = {r.name for r in results}
    assert {a.name for a in attacks} | {"neighbours_unaffected", "no_leftover_processes"} <= names


def test_nothing_to_run(cluster: ClusterSandbox) -> None:
    assert cluster.run_tasks([]) == [] and cluster.run_grids([]) == [] and cluster.run_checks([]) == []


def test_a_node_actor_killed_mid_run_is_a_clear_error(ray: Any) -> None:
    sandbox = ClusterSandbox(SandboxConfig(test_cpu_s=0.5, load_cpu_s=1.0), 1)
    try:
        tasks = [ProgramTask.make(LOOP, "f", ("f(1)", "f(2)", "f(3)"), sandbox.config) for _ in range(4)]
        node = ray.get_runtime_context().get_node_id()[:8]
        (actor,) = [n.actor for n in sandbox._nodes]
        killer = threading.Timer(1.0, ray.kill, args=(actor,))
        start = time.monotonic()
        killer.start()
        with pytest.raises(WorkerFailure, match=f"sandbox node .*{node}.*actor died"):
            sandbox.run_tasks(tasks)
        assert time.monotonic() - start < 20
        with pytest.raises(SandboxUnavailable, match="no sandbox node is left"):
            sandbox.run_tasks(tasks)
    finally:
        killer.cancel()
        sandbox.close()
    with pytest.raises(SandboxUnavailable, match="closed"):
        sandbox.run_tasks(tasks)


def test_a_node_past_its_deadline_is_a_clear_error(ray: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = ClusterSandbox(SandboxConfig(test_cpu_s=0.5, load_cpu_s=1.0), 1)
    try:
        task = ProgramTask.make(LOOP, "f", tuple(f"f({i})" for i in range(6)), sandbox.config)  # 3 s
        # shrink the deadline of a batch to 0.4 s: the node must be given up, not waited for
        monkeypatch.setattr(cluster_module, "_TASK_OVERHEAD_S", 0.2 - task.deadline_s())
        monkeypatch.setattr(cluster_module, "_SLACK_S", 0.0)
        start = time.monotonic()
        with pytest.raises(WorkerFailure, match="missed its deadline"):
            sandbox.run_tasks([task])
        assert time.monotonic() - start < 2.5
        assert not sandbox.node_workers()
    finally:
        sandbox.close()


@pytest.mark.usefixtures("python_sigint")
def test_ctrl_c_cancels_the_queued_batches_and_close_stops_every_worker(ray: Any) -> None:
    sandbox = ClusterSandbox(SandboxConfig(test_cpu_s=0.5, load_cpu_s=1.0), 1)
    interrupt = threading.Timer(1.0, _thread.interrupt_main)
    try:
        pids = sandbox.worker_pids()
        assert len(pids) == 2
        tasks = [ProgramTask.make(LOOP, "f", (f"f({i})",), sandbox.config) for i in range(40)]  # 20 s of work
        start = time.monotonic()
        interrupt.start()
        with pytest.raises(KeyboardInterrupt):
            sandbox.run_tasks(tasks)
        assert time.monotonic() - start < 5
        # the call stopped: the next one is not held up behind the rest of the 40 loops
        (g,) = sandbox.run_grids(JOBS[-1:])
        assert [v.status for row in g.verdicts for v in row] == ["pass", "fail"]
        assert time.monotonic() - start < 10
    finally:
        interrupt.cancel()
        sandbox.close()
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}")]


def test_close_stops_the_node_actors(ray: Any) -> None:
    sandbox = ClusterSandbox(CFG, 8)
    (actor,) = [n.actor for n in sandbox._nodes]
    sandbox.close()
    sandbox.close()
    # ray.kill is asynchronous: a call sent at once may still be answered, so poll until it is not
    deadline = time.monotonic() + 30
    while True:
        try:
            ray.get(actor.ready.remote(), timeout=30)
        except ray.exceptions.RayActorError:
            break
        assert time.monotonic() < deadline, "a node actor still answers 30 s after close()"
        time.sleep(0.2)


def test_bad_settings_are_refused_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="sandbox_batch"):
        ClusterSandbox(CFG, 0)
    with pytest.raises(ValueError, match="test_cpu_s"):
        ClusterSandbox(SandboxConfig(test_cpu_s=0), 8)
    monkeypatch.setitem(sys.modules, "ray", None)  # ray not installed
    with pytest.raises(SandboxUnavailable) as e:
        ClusterSandbox(CFG, 8)
    assert str(e.value) == RAY_MISSING


def test_ray_must_be_initialised_first(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray", reason="the sandbox fan-out needs ray (pip install 'codea1[ray]')")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(SandboxUnavailable, match=r"ray\.init"):
        ClusterSandbox(CFG, 8)
