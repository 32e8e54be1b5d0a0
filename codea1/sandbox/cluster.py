"""The :class:`ClusterSandbox`: the program tasks of a step fanned out over every node of a Ray cluster.

One long-lived Ray actor per alive node with CPUs, pinned to it (node affinity, ``num_cpus=0``: it
takes no CPU from the learners and replicas, its workers use the node's cores as the local pool
does). Each actor holds local :class:`~codea1.sandbox.local.Sandbox` pools ("lanes") of at most
``batch`` workers each, together as many workers as the node has CPUs (or ``sandbox.workers``),
and runs one batch per lane at a time. The driver cuts the tasks, longest first, into batches of
``batch`` tasks and keeps ``IN_FLIGHT_PER_LANE`` batches per lane queued at each actor, handing a
node its next batch when one of its batches comes back, so a slow node takes fewer batches.

The actors only run tasks, as pool workers do; planning and verdicts stay on the driver
(:class:`~codea1.sandbox.executor.TaskExecutor`), so the verdicts are those of the local pool.

``ray`` is optional: it is imported on use, and its absence is a :class:`SandboxUnavailable`.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from codea1.config import SandboxConfig
from codea1.sandbox.executor import SandboxUnavailable, TaskExecutor, WorkerFailure
from codea1.sandbox.tasks import ProgramOutcome, ProgramTask, check_config

RAY_MISSING = "engine.backend=ray needs ray: pip install 'codea1[ray]'"
IN_FLIGHT_PER_LANE = 2
"""Batches queued at a node actor per lane: one running, one ready to start when it returns."""
START_TIMEOUT_S = 180.0
"""How long the node actors may take to start their workers."""
CLOSE_TIMEOUT_S = 10.0
"""How long ``close`` waits for a node to stop its workers before the actor is killed."""
_TASK_OVERHEAD_S = 70.0
"""Worst case per task on top of its deadline: a worker restart (60 s) and the pool's reply grace."""
_SLACK_S = 30.0
"""Added to every node deadline: Ray's scheduling and the transfer of the batches."""
_POLL_S = 0.5
"""Longest wait for a batch before deadlines (and Ctrl-C) are looked at again."""
_CONTROL = "control"
"""Concurrency group of the actor methods that must not queue behind batches."""


def lane_sizes(workers: int, batch: int) -> list[int]:
    """Workers of each lane of a node: ``ceil(workers / batch)`` lanes, sizes as even as possible."""
    lanes = max(1, math.ceil(workers / batch))
    return [workers // lanes + (1 if i < workers % lanes else 0) for i in range(lanes)]


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise SandboxUnavailable(RAY_MISSING) from e
    return ray


class _NodeSandbox:
    """The body of a node actor: lanes of local pools, one batch per lane at a time.

    The actor's default concurrency group has one thread per lane, so a running batch always
    finds a free lane; ``ready``, ``worker_pids`` and ``close`` run in the control group.
    """

    def __init__(self, config: SandboxConfig, lanes: list[int]) -> None:
        from codea1.sandbox.local import Sandbox

        self._lanes: list[Sandbox] = []
        self._free: queue.SimpleQueue[Sandbox] = queue.SimpleQueue()
        self._closing = False
        self._error = ""
        try:
            for n in lanes:
                self._lanes.append(Sandbox(dataclasses.replace(config, workers=n)))
        except (SandboxUnavailable, ValueError, OSError) as e:
            self._error = str(e) or type(e).__name__
            for lane in self._lanes:
                lane.close()
            return
        for lane in self._lanes:
            self._free.put(lane)

    def ready(self) -> dict[str, Any]:
        """``{"error": why}``, or ``{"layers": …}`` of this node's sandbox."""
        if self._error:
            return {"error": self._error}
        return {"layers": self._lanes[0].layers()}

    def run(self, tasks: list[ProgramTask]) -> list[ProgramOutcome]:
        """Run one batch on a free lane; outcomes in task order."""
        if self._closing or self._error:
            raise SandboxUnavailable("the node's sandbox is closed")
        try:
            lane = self._free.get(timeout=5.0)
        except queue.Empty:
            raise SandboxUnavailable("the node's sandbox is closing") from None
        try:
            return lane.run_tasks(tasks)
        finally:
            self._free.put(lane)

    def worker_pids(self) -> list[int]:
        """Pids of this node's worker processes."""
        return [pid for lane in self._lanes for pid in lane.worker_pids()]

    def close(self, timeout_s: float) -> bool:
        """Stop every lane once its batch is done; False when some lane was still busy at the timeout."""
        self._closing = True
        deadline = time.monotonic() + timeout_s
        for _ in self._lanes:
            try:
                lane = self._free.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return False
            lane.close()
        return True


@functools.cache
def _node_actor_class() -> Any:
    return _import_ray().remote(concurrency_groups={_CONTROL: 1})(_NodeSandbox)


@dataclass
class _Node:
    """The driver's view of one node actor."""

    node_id: str
    label: str
    actor: Any
    lanes: list[int]
    layers: dict[str, str] = field(default_factory=dict)
    in_flight: int = 0
    last_progress: float = 0.0

    @property
    def capacity(self) -> int:
        """Batches kept queued at the actor."""
        return IN_FLIGHT_PER_LANE * len(self.lanes)


@dataclass(frozen=True)
class _Flight:
    """One batch at a node: the indices of its tasks and how long it may take at worst."""

    node: _Node
    indices: list[int]
    bound_s: float


def _first_line(e: BaseException) -> str:
    cause = getattr(e, "cause", None)
    text = str(cause if isinstance(cause, BaseException) else e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class ClusterSandbox(TaskExecutor):
    """Isolated execution of untrusted programs on the CPUs of every node of a Ray cluster.

    ``ClusterSandbox(sandbox_cfg, batch)``: ``sandbox_cfg`` is the run's ``sandbox`` section (its
    budgets; ``workers`` = workers per node, 0 = the node's Ray CPUs), ``batch`` the program tasks
    per Ray call (``cluster.sandbox_batch``). Ray must already be initialised (the Ray backend
    does that); nodes alive with at least one CPU when it starts get a node actor, nodes added
    later do not. Raises :class:`SandboxUnavailable` when ray is missing or not initialised, or a
    node's sandbox does not start (strict isolation included), ValueError for unusable budgets.

    A node actor that dies or misses its deadline during ``run_tasks`` raises
    :class:`WorkerFailure` naming the node; that node is dropped and later calls use the others.
    """

    def __init__(self, sandbox_cfg: SandboxConfig, batch: int) -> None:
        self._closed = True  # until the actors exist: close() has nothing to do
        self._nodes: list[_Node] = []
        check_config(sandbox_cfg)
        if sandbox_cfg.workers < 0:
            raise ValueError(f"sandbox config: workers must be >= 0, got {sandbox_cfg.workers}")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"cluster.sandbox_batch must be an integer >= 1, got {batch!r}")
        self.config = sandbox_cfg
        self.batch = batch
        ray = _import_ray()
        if not ray.is_initialized():
            raise SandboxUnavailable("the Ray sandbox needs a running Ray: call ray.init() first")
        self._lock = threading.Lock()
        self._closed = False
        atexit.register(self.close)
        try:
            self._start(ray)
        except BaseException:  # a node that failed, or Ctrl-C while starting: no actor left behind
            self.close()
            raise

    def _start(self, ray: Any) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1]
        if not alive:
            raise SandboxUnavailable("no alive Ray node has a CPU for the sandbox")
        actor_class = _node_actor_class()
        for info in alive:
            node_id = info["NodeID"]
            lanes = lane_sizes(self.config.workers or int(info["Resources"]["CPU"]), self.batch)
            actor = actor_class.options(
                num_cpus=0,
                max_concurrency=len(lanes),
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(self.config, lanes)
            label = f"{info.get('NodeManagerAddress', '?')} ({node_id[:8]})"
            self._nodes.append(_Node(node_id, label, actor, lanes))
        waiting = {n.actor.ready.options(concurrency_group=_CONTROL).remote(): n for n in self._nodes}
        deadline = time.monotonic() + START_TIMEOUT_S
        while waiting:
            if time.monotonic() > deadline:
                late = ", ".join(n.label for n in waiting.values())
                raise SandboxUnavailable(
                    f"sandbox node(s) {late} did not start within {START_TIMEOUT_S:.0f} s"
                )
            done, _ = ray.wait(list(waiting), num_returns=1, timeout=_POLL_S)
            for ref in done:
                node = waiting.pop(ref)
                try:
                    answer = ray.get(ref)
                except ray.exceptions.RayError as e:
                    raise SandboxUnavailable(
                        f"sandbox node {node.label} did not start: {_first_line(e)}"
                    ) from e
                if "error" in answer:
                    raise SandboxUnavailable(f"sandbox node {node.label}: {answer['error']}")
                node.layers = dict(sorted(answer["layers"].items()))

    def layers(self) -> dict[str, str]:
        """Layer → ``"active"`` where every node has it active, else ``"unavailable: …"`` listing
        each node's status (see :meth:`node_layers`)."""
        per_node = self.node_layers()
        out: dict[str, str] = {}
        for name in sorted({k for layers in per_node.values() for k in layers}):
            statuses = {
                label: layers.get(name, "unavailable: not reported") for label, layers in per_node.items()
            }
            distinct = set(statuses.values())
            if len(distinct) == 1:
                out[name] = distinct.pop()
            else:
                listed = "; ".join(f"{label}: {status}" for label, status in statuses.items())
                out[name] = f"unavailable: differs between nodes ({listed})"
        return out

    def node_layers(self) -> dict[str, dict[str, str]]:
        """Node label (``address (node id prefix)``) → that node's layers."""
        return {n.label: dict(n.layers) for n in self._nodes}

    def node_workers(self) -> dict[str, int]:
        """Node label → sandbox workers on that node."""
        return {n.label: sum(n.lanes) for n in self._nodes}

    def worker_pids(self) -> list[int]:
        """Pids of the worker processes on the driver's own node (the ones its ``/proc`` shows)."""
        if self._closed:
            return []
        ray = _import_ray()
        here = ray.get_runtime_context().get_node_id()
        refs = [
            n.actor.worker_pids.options(concurrency_group=_CONTROL).remote()
            for n in self._nodes
            if n.node_id == here
        ]
        return [pid for pids in ray.get(refs, timeout=CLOSE_TIMEOUT_S) for pid in pids]

    def run_tasks(self, tasks: Sequence[ProgramTask]) -> list[ProgramOutcome]:
        """Run program tasks in batches over the node actors; outcomes in task order.

        Raises :class:`WorkerFailure` (naming the node) when a node actor dies or no batch of it
        comes back within the budgets of its tasks; queued batches are cancelled first.
        """
        if self._closed:
            raise SandboxUnavailable("the sandbox is closed")
        if not tasks:
            return []
        ray = _import_ray()
        with self._lock:
            if not self._nodes:
                raise SandboxUnavailable("no sandbox node is left (every node actor failed)")
            return self._fan_out(ray, tasks)

    def _fan_out(self, ray: Any, tasks: Sequence[ProgramTask]) -> list[ProgramOutcome]:
        order = sorted(range(len(tasks)), key=lambda i: -len(tasks[i].exprs))
        pending = deque(order[k : k + self.batch] for k in range(0, len(order), self.batch))
        results: list[ProgramOutcome | None] = [None] * len(tasks)
        flights: dict[Any, _Flight] = {}

        def submit(node: _Node) -> None:
            indices = pending.popleft()
            batch = [tasks[i] for i in indices]
            bounds = [t.deadline_s() + _TASK_OVERHEAD_S for t in batch]
            bound = sum(bounds) / min(node.lanes) + max(bounds)  # list scheduling over a lane's workers
            if node.in_flight == 0:
                node.last_progress = time.monotonic()
            node.in_flight += 1
            flights[node.actor.run.remote(batch)] = _Flight(node, indices, bound)

        try:
            while pending and any(n.in_flight < n.capacity for n in self._nodes):
                for node in self._nodes:  # round robin: every node gets work before any gets more
                    if pending and node.in_flight < node.capacity:
                        submit(node)
            while flights:
                done, _ = ray.wait(list(flights), num_returns=1, timeout=_POLL_S)
                for ref in done:
                    flight = flights.pop(ref)
                    node = flight.node
                    node.in_flight -= 1
                    node.last_progress = time.monotonic()
                    for i, outcome in zip(flight.indices, self._collect(ray, ref, flight), strict=True):
                        results[i] = outcome
                    while pending and node.in_flight < node.capacity:
                        submit(node)
                self._check_deadlines(ray, flights)
        except BaseException:  # a failed node or Ctrl-C: no queued batch may run after this call
            for ref in flights:
                try:
                    ray.cancel(ref)
                except Exception:  # noqa: BLE001 - best effort; a running batch ends on its own
                    pass
            for node in self._nodes:
                node.in_flight = 0
            raise
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            raise WorkerFailure(f"{len(missing)} of {len(tasks)} tasks came back without an outcome")
        return [r for r in results if r is not None]

    def _collect(self, ray: Any, ref: Any, flight: _Flight) -> list[ProgramOutcome]:
        node = flight.node
        try:
            outcomes = ray.get(ref)
        except ray.exceptions.RayActorError as e:
            self._drop(ray, node)
            raise WorkerFailure(f"sandbox node {node.label} failed: its actor died ({_first_line(e)})") from e
        except ray.exceptions.RayError as e:
            raise WorkerFailure(f"sandbox node {node.label} failed: {_first_line(e)}") from e
        if not isinstance(outcomes, list) or len(outcomes) != len(flight.indices):
            raise WorkerFailure(f"sandbox node {node.label} returned a batch of the wrong size")
        return outcomes

    def _check_deadlines(self, ray: Any, flights: dict[Any, _Flight]) -> None:
        """A node whose batches stopped coming back for longer than its longest batch may take fails."""
        now = time.monotonic()
        for node in list(self._nodes):
            bounds = [f.bound_s for f in flights.values() if f.node is node]
            if bounds and now - node.last_progress > max(bounds) + _SLACK_S:
                waited = now - node.last_progress
                self._drop(ray, node)
                raise WorkerFailure(
                    f"sandbox node {node.label} missed its deadline: no batch back in {waited:.0f} s"
                )

    def _drop(self, ray: Any, node: _Node) -> None:
        """Forget a failed node and make sure its actor is gone."""
        if node in self._nodes:
            self._nodes.remove(node)
        try:
            ray.kill(node.actor)
        except Exception:  # noqa: BLE001 - already dead
            pass

    def close(self) -> None:
        """Stop every node's workers (waiting up to ``CLOSE_TIMEOUT_S`` for running batches), then
        kill the node actors. A worker left running by a killed actor exits after its current job."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        nodes, self._nodes = self._nodes, []
        if not nodes:
            return
        try:
            import ray
        except ImportError:
            return
        if not ray.is_initialized():
            return  # Ray is down: the actors went with it
        try:
            refs = [n.actor.close.options(concurrency_group=_CONTROL).remote(CLOSE_TIMEOUT_S) for n in nodes]
            ray.wait(refs, num_returns=len(refs), timeout=CLOSE_TIMEOUT_S + 5.0)
        except Exception:  # noqa: BLE001 - the actors are killed below in any case
            pass
        finally:
            for n in nodes:
                try:
                    ray.kill(n.actor)
                except Exception:  # noqa: BLE001 - already dead
                    pass

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
