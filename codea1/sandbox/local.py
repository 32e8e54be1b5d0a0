"""The :class:`Sandbox`: a pool of pre-started sandbox workers and the public execution API.

Workers are started once (one per core by default) and talk to the parent through pipes with
length-prefixed ``marshal`` messages (trusted to trusted). A dispatcher thread per worker pulls program tasks
from a shared queue; a worker that dies or does not answer within its task's deadline is killed
(its whole namespace and cgroup with it), restarted, and its task reported as ``error``.
"""

from __future__ import annotations

import atexit
import marshal
import os
import queue
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codea1.config import SandboxConfig
from codea1.sandbox import cgroups, scratch
from codea1.sandbox.channels import open_channels
from codea1.sandbox.executor import SandboxUnavailable, TaskExecutor, WorkerFailure
from codea1.sandbox.tasks import ProgramOutcome, ProgramTask, check_config, failed_outcome, parse_result
from codea1.sandbox.worker import isolation

_HEADER = struct.Struct("<I")
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from codea1.sandbox.worker.zygote import worker_main; worker_main(sys.argv[2])"
)


def _site_dirs() -> list[str]:
    """site-packages of this interpreter: workers start without ``site`` (-S) but keep these on the path."""
    import site

    return [d for d in getattr(site, "getsitepackages", list)() if os.path.isdir(d)]


_REQUIRED_LAYERS = (
    "net_ns", "pid_ns", "mount_ns", "ipc_ns", "minimal_root", "rlimits", "seccomp", "landlock", "cgroup_pids",
)  # fmt: skip


def strict_refusal(layers: dict[str, str]) -> str:
    """Why ``isolation: strict`` refuses to run with these layers (the host channels left open
    named), or "" when every required layer is active."""
    missing = [k for k in _REQUIRED_LAYERS if layers.get(k) != isolation.ACTIVE]
    if not missing:
        return ""
    still_open = open_channels(layers)
    return f"strict isolation: layers not active: {', '.join(missing)}" + (
        f" (open channels: {'; '.join(still_open)})" if still_open else ""
    )


def memory_limit_refusal(memory_mb: int, setting: str = "--memory-mb, sandbox.memory_mb") -> str:
    """Why a program cannot get the address-space limit ``memory_mb`` (MiB), or "" when it can;
    ``setting`` names what sets it.

    Each program process sets ``RLIMIT_AS`` to ``memory_mb`` and cannot raise it past the hard
    limit it inherits from this process. Failing there would mark every program, the reference
    solutions included, ``sandbox setup failed``: a host fault reported as results, so it is
    refused before anything starts.
    """
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    if hard == resource.RLIM_INFINITY or memory_mb << 20 <= hard:
        return ""
    return (
        f"cannot give sandboxed programs their memory limit: memory_mb={memory_mb} MiB ({setting}) "
        f"is above this process's hard address-space limit of {hard >> 20} MiB "
        "(ulimit -Hv); lower the memory limit or raise the hard limit"
    )


def default_sandbox_config() -> SandboxConfig:
    """The default sandbox configuration (one worker per core, every available layer)."""
    return SandboxConfig()


class _Worker:
    """One worker process (outer + zygote) with its cgroups and scratch directory."""

    def __init__(self, index: int, cfg: SandboxConfig, root: str, tag: str) -> None:
        self.index, self.cfg, self.root, self.tag = index, cfg, root, tag
        self.generation = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.cgroups: cgroups.WorkerCgroups | None = None
        self.layers: dict[str, str] = {}

    def spawn(self) -> None:
        """Start the process (the ready message is read by :meth:`wait_ready`)."""
        self.generation += 1
        self.cgroups = cgroups.WorkerCgroups(
            f"codea1-{self.tag}-w{self.index}-g{self.generation}",
            memory_bytes=(self.cfg.memory_mb + 512) << 20,
            pids_max=128,
            enabled=self.cfg.isolation != "none",
        )
        scratch = os.path.join(self.root, f"w{self.index}")
        os.makedirs(scratch, exist_ok=True)
        isolation.wipe_directory(scratch)
        plan = {
            "scratch": scratch,
            "scratch_mb": 256,
            "isolation": self.cfg.isolation,
            "cgroup_procs": self.cgroups.procs_files(),
            "site_dirs": _site_dirs(),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _BOOT, _PACKAGE_ROOT, marshal.dumps(plan).hex()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=isolation.worker_environment(), cwd=scratch, start_new_session=True, bufsize=0,
        )  # fmt: skip

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Read the ready message; raises :class:`WorkerFailure` if it does not come."""
        msg = self.receive(timeout)
        if not isinstance(msg, dict) or not msg.get("ready"):
            raise WorkerFailure(f"worker {self.index} sent no ready message")
        assert self.cgroups is not None
        self.layers = {**self.cgroups.status, **msg["layers"]}

    def send(self, obj: Any) -> None:
        """Send one message to the worker."""
        assert self.proc is not None and self.proc.stdin is not None
        data = marshal.dumps(obj)
        try:
            self.proc.stdin.write(_HEADER.pack(len(data)) + data)
        except (BrokenPipeError, OSError) as e:
            raise WorkerFailure(f"worker {self.index} is gone ({e})") from e

    def receive(self, timeout: float) -> Any:
        """Receive one message within ``timeout`` seconds."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        head = self._read(fd, 4, deadline)
        return marshal.loads(self._read(fd, _HEADER.unpack(head)[0], deadline))

    def _read(self, fd: int, n: int, deadline: float) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerFailure(f"worker {self.index} missed its deadline")
            readable, _, _ = select.select([fd], [], [], remaining)
            if readable:
                chunk = os.read(fd, n - len(buf))
                if not chunk:
                    raise WorkerFailure(f"worker {self.index} exited")
                buf += chunk
        return bytes(buf)

    def kill(self) -> None:
        """Kill the worker, everything it started, and remove its cgroups."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                if f is not None:
                    f.close()
            self.proc = None
        if self.cgroups is not None:
            self.cgroups.remove()
            self.cgroups = None

    def interrupt(self) -> None:
        """Kill the running process tree without touching this object's state (safe from another thread).

        The dispatcher thread blocked on this worker then sees it exit and cleans up itself.
        """
        proc = self.proc
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def close(self) -> None:
        """Ask the worker to exit (stdin EOF), then make sure it is gone."""
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def run(self, task: ProgramTask) -> ProgramOutcome:
        """Run one task; on any failure restart the worker and report the task as ``error``."""
        try:
            if self.proc is None:
                self.spawn()
                self.wait_ready()
            self.send(task.message())
            raw = self.receive(task.deadline_s() + 10.0)
            return parse_result(task, raw)
        except (WorkerFailure, EOFError, OSError, ValueError) as e:
            self.kill()
            return failed_outcome(task, f"sandbox worker failed: {e}")


def _wait_quietly(events: Sequence[threading.Event], timeout_s: float = 30.0) -> None:
    """Wait until every event is set (dispatchers stopping within moments); a repeated Ctrl-C does
    not cut the wait short."""
    deadline = time.monotonic() + timeout_s
    for event in events:
        while True:
            try:
                if event.wait(timeout=0.1) or time.monotonic() > deadline:
                    break
            except KeyboardInterrupt:
                continue


def _proc_ticks(pid: int, with_children: bool) -> int:
    """utime + stime (+ cutime + cstime) of ``pid`` from /proc, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = int(fields[11]) + int(fields[12])
    return own + (int(fields[13]) + int(fields[14]) if with_children else 0)


def _tree_ticks(pid: int) -> int:
    """CPU ticks of ``pid``, of the children it reaped and of its descendants still in the process
    table (running, or exited and not yet reaped), from /proc. A process that vanishes between the
    reads counts as nothing; ``pid`` itself must exist (OSError otherwise)."""
    # read before its children: one reaped in between is missed, never counted twice
    total = _proc_ticks(pid, with_children=True)
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            total += _tree_ticks(int(child))
        except (OSError, ValueError):
            continue
    return total


class Sandbox(TaskExecutor):
    """Isolated execution of untrusted programs against tests, on this machine's cores (see
    docs/sandbox.md); ``run_grids`` and ``run_checks`` come from :class:`TaskExecutor`."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self._closed = True  # until the scratch root exists: close() has nothing to do
        self.config = config or default_sandbox_config()
        check_config(self.config)
        if refusal := memory_limit_refusal(self.config.memory_mb):
            raise SandboxUnavailable(refusal)
        n = self.config.workers or os.cpu_count() or 1
        if n < 1:
            raise ValueError(f"sandbox config: workers must be >= 0, got {self.config.workers}")
        cgroups.remove_stale_cgroups()
        scratch.remove_stale_roots()
        self._root = scratch.make_root()
        tag = f"{os.getpid()}-{id(self) & 0xFFFFFF:x}"
        self._workers = [_Worker(i, self.config, self._root, tag) for i in range(n)]
        self._lock = threading.Lock()
        self._closed = False
        atexit.register(self.close)
        try:
            for w in self._workers:
                w.spawn()
            for w in self._workers:
                w.wait_ready()
        except (WorkerFailure, OSError) as e:
            self.close()
            raise SandboxUnavailable(f"sandbox workers did not start: {e}") from e
        except BaseException:  # Ctrl-C while starting: leave no worker and no directory behind
            self.close()
            raise
        self._layers = dict(sorted(self._workers[0].layers.items()))
        refusal = strict_refusal(self._layers) if self.config.isolation == "strict" else ""
        if refusal:
            self.close()
            raise SandboxUnavailable(refusal)

    def layers(self) -> dict[str, str]:
        """Isolation layer name → ``"active"`` or ``"unavailable: <why>"``."""
        return dict(self._layers)

    def run_tasks(self, tasks: Sequence[ProgramTask]) -> list[ProgramOutcome]:
        """Run program tasks in parallel over the workers; results in task order.

        Every task's budgets were validated when it was made, so nothing here starts a task that
        could fail only because of its configuration.
        """
        if self._closed:
            raise SandboxUnavailable("the sandbox is closed")
        if tasks and (refusal := memory_limit_refusal(max(t.memory_mb for t in tasks))):
            raise SandboxUnavailable(refusal)  # a task's own budget past the host's limit
        results: list[ProgramOutcome | None] = [None] * len(tasks)
        order = sorted(range(len(tasks)), key=lambda i: -len(tasks[i].exprs))
        todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in order:
            todo.put(i)

        stop = threading.Event()

        def serve(worker: _Worker, finished: threading.Event | None = None) -> None:
            try:
                while not stop.is_set():
                    try:
                        i = todo.get_nowait()
                    except queue.Empty:
                        return
                    results[i] = worker.run(tasks[i])
            finally:
                if finished is not None:
                    finished.set()

        with self._lock:
            active = self._workers[: max(1, min(len(self._workers), len(tasks)))]
            if len(active) == 1:
                try:
                    serve(active[0])
                except BaseException:  # Ctrl-C: do not let close() wait for the task to finish
                    active[0].interrupt()
                    raise
            else:
                finished = [threading.Event() for _ in active]
                threads = [
                    threading.Thread(target=serve, args=(w, f), daemon=True)
                    for w, f in zip(active, finished, strict=True)
                ]
                try:
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                except BaseException:
                    # Ctrl-C: stop the dispatchers before anything else touches the workers. (An
                    # interrupted Thread.join may report a running thread as stopped: wait on events.)
                    stop.set()
                    for w in active:
                        w.interrupt()
                    _wait_quietly([f for f, t in zip(finished, threads, strict=True) if t.ident is not None])
                    raise
        return [r if r is not None else failed_outcome(tasks[i], "not run") for i, r in enumerate(results)]

    def worker_cpu_s(self) -> float:
        """CPU seconds used so far by the live workers, their job processes and every process they
        reaped (jobs, tests).

        A job's runner can still be unreaped when :meth:`run_tasks` has its result (it writes the
        result, then exits and is reaped): it counts then as a process of the worker's tree, so
        differences of this value measure the sandbox's own cost at any time. A worker that was
        restarted is reaped by this process instead (``RUSAGE_CHILDREN``). Resolution: one clock
        tick (Linux ``/proc``).
        """
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in self.worker_pids():
            try:
                total += _tree_ticks(pid)
            except (OSError, ValueError):
                continue
        return total / tick

    def worker_pids(self) -> list[int]:
        """Pids of the running worker processes (the outer process of each)."""
        return [w.proc.pid for w in self._workers if w.proc is not None]

    def close(self) -> None:
        """Stop every worker and remove cgroups and scratch directories."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        for w in self._workers:
            w.close()
        shutil.rmtree(self._root, ignore_errors=True)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
