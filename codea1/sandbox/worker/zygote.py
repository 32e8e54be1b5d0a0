"""The sandbox worker: a trusted zygote that forks, per job, a runner, a program and per-test children.

Process tree of one worker (docs/sandbox.md, "Design (fork server)")::

    outer (joins the worker cgroups, unshares net/mount/pid namespaces, waits)
    └── zygote (pid 1 of the new pid namespace; tmpfs scratch, scrubbed env, Landlock; never runs
        │       user code and never holds job data, so every fork starts clean)
        └── runner R (one per job: reads the job from the parent, writes the result back)
            └── program P (rlimits + seccomp F1; executes the definitions once)
                └── test child C (one per expression: seccomp F2, CPU itimer; encodes the value)

After each job the zygote SIGKILLs every other process in its namespace and wipes the scratch
dir. Values cross from C to P to R (and, for checks, from C to H) as frames of :mod:`value_codec`
bytes; the parent decodes them and checks the stream's shape.
Messages between the parent and R are length-prefixed ``marshal`` dumps of plain dicts (trusted to
trusted only; ``marshal`` needs no native library, unlike ``pickle``).
"""

from __future__ import annotations

import gc
import marshal
import os
import select
import signal
import struct
import sys
import time
from typing import Any

from codea1.sandbox.worker import isolation, landlock, seccomp
from codea1.sandbox.worker.harness import harness_main
from codea1.sandbox.worker.program import program_main, warm_up
from codea1.sandbox.worker.value_codec import CodecError, decode

_HEADER = struct.Struct("<I")
_PRELOAD = (
    "math re collections itertools functools heapq bisect string typing random operator copy numbers textwrap"
).split()
"""Imported once in the zygote: what typical programs import. Modules with large native libraries
(hashlib, decimal, datetime, json, ...) are left to the programs that use them: every library
mapped into the zygote makes every later fork (two per program, one per test) dearer."""
_EXIT_PARENT_GONE = 3


# --------------------------------------------------------------------------------------------------
# Messages between the trusted parent and the worker
# --------------------------------------------------------------------------------------------------


def write_message(fd: int, obj: Any) -> None:
    """Write one length-prefixed message (trusted → trusted only)."""
    data = marshal.dumps(obj)
    _write_all(fd, _HEADER.pack(len(data)) + data)


def read_message(fd: int) -> Any:
    """Read one length-prefixed message; ``None`` at end of stream."""
    head = _read_exact(fd, 4)
    if head is None:
        return None
    data = _read_exact(fd, _HEADER.unpack(head)[0])
    return None if data is None else marshal.loads(data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


# --------------------------------------------------------------------------------------------------
# Worker start: outer process and zygote
# --------------------------------------------------------------------------------------------------


def worker_main(plan_hex: str) -> None:
    """Entry point of a worker process (``plan_hex``: the parent's plan, marshalled, in hex)."""
    plan = marshal.loads(bytes.fromhex(plan_hex))
    sys.path.extend(plan["site_dirs"])  # started with -S: no .pth processing, just the directories
    layers: dict[str, str] = {}
    for path in plan["cgroup_procs"]:
        try:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        except OSError as e:
            layers[f"cgroup_{path.split('/')[-3]}"] = isolation.unavailable(f"join: {e.strerror}")
    layers.update(isolation.enter_namespaces(plan["isolation"]))
    outer = os.getpid()
    pid = os.fork()
    if pid:
        os.close(0)
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    isolation.set_parent_death_signal(signal.SIGKILL)
    if os.getppid() not in (outer, 0):  # 0: the parent lives outside our pid namespace
        os._exit(1)
    _zygote(plan, layers)


def _zygote(plan: dict[str, Any], layers: dict[str, str]) -> None:
    scratch = plan["scratch"]
    ro, rw = isolation.confinement_paths(scratch, plan["site_dirs"])
    isolation.setup_mounts(layers, scratch, plan["scratch_mb"], ro)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    isolation.scrub_environment(scratch)
    layers["env_scrub"] = isolation.ACTIVE
    os.chdir(scratch)
    for name in _PRELOAD:
        __import__(name)
    warm_up()
    sys.modules["random"].seed(0)
    enabled = plan["isolation"] != "none"
    why = seccomp.unavailable_reason() if enabled else "isolation=none"
    layers["seccomp"] = isolation.ACTIVE if not why else isolation.unavailable(why)
    layers["rlimits"] = isolation.ACTIVE
    if enabled:
        try:
            abi = landlock.restrict_self(ro, rw)
            layers["landlock"] = isolation.ACTIVE if abi else isolation.unavailable("no ABI")
        except OSError as e:
            layers["landlock"] = isolation.unavailable(str(e))
    else:
        layers["landlock"] = isolation.unavailable("isolation=none")
    context = {
        "scratch": os.path.join(scratch, "job"),
        "filters": seccomp.PreparedFilters() if layers["seccomp"] == isolation.ACTIVE else None,
        "pid_ns": os.getpid() == 1,
    }
    gc.collect()
    gc.freeze()
    write_message(1, {"ready": True, "layers": layers})
    while True:
        try:
            readable, _, _ = select.select([0], [], [])
        except InterruptedError:
            continue
        if not readable:
            continue
        runner = os.fork()
        if runner == 0:
            _runner_main(context)
        _, status = os.waitpid(runner, 0)
        _sweep(context["pid_ns"], runner)
        isolation.wipe_directory(scratch)
        code = os.waitstatus_to_exitcode(status)
        if code == _EXIT_PARENT_GONE:
            os._exit(0)
        if code != 0:
            write_message(1, {"error": f"job runner died ({_describe_status(status)})"})


def _sweep(pid_ns: bool, runner: int) -> None:
    """Kill every process left from the job and reap it (pid-ns init sweep, or the runner's group)."""
    while True:
        try:
            if pid_ns:
                os.kill(-1, signal.SIGKILL)
            else:
                os.killpg(runner, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


# --------------------------------------------------------------------------------------------------
# Runner R: one job
# --------------------------------------------------------------------------------------------------


def _runner_main(context: dict[str, Any]) -> None:
    try:
        os.setpgid(0, 0)
        task = read_message(0)
        if task is None:
            os._exit(_EXIT_PARENT_GONE)
        os.makedirs(context["scratch"], exist_ok=True)
        runner = _run_check if task.get("harness") is not None else _run_program
        result = runner(task, context)
        write_message(1, result)
    except BaseException as e:  # noqa: BLE001 - reported by the zygote as a runner failure
        try:
            os.write(2, f"runner: {type(e).__name__}: {e}\n".encode())
        finally:
            os._exit(1)
    os._exit(0)


def _run_program(task: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """Grid job: fork the program P and collect its stream until it exits (or a deadline passes)."""
    n = len(task["exprs"])
    test_wall = task["wall_factor"] * task["test_cpu_s"] + 0.5
    load_wall = task["wall_factor"] * task["load_cpu_s"] + 0.5
    start = time.monotonic()
    deadline = start + load_wall + n * (test_wall + 0.05) + 1.0
    cap = n * (task["max_output_bytes"] + 1200) + 65536
    protected = (1, os.getppid(), os.getpid())
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            program_main(task, w, context, protected)
        finally:
            os._exit(0)
    os.close(w)
    program = _Stream(pid, r, cap)
    # until the first frame (the load report) arrives, the definitions' own wall backstop applies:
    # P's CPU hard limit leaves room for its tests' limits, so it is not the load's backstop
    timed_out = _collect([program], deadline, min(deadline, start + load_wall + 0.5))
    return {**program.result("p_"), "data": program.data(), "deadline": timed_out,
            "overflow": program.overflow, "killed": program.killed}  # fmt: skip


def _run_check(task: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """Check job: fork the harness process H, then the candidate program P, joined by call pipes.

    H holds the request pipe's write end and the response pipe's read end; P (and the call server
    it forks) the other ends. Only H holds H's report pipe, so nothing the candidate writes can
    reach the verdict except as a return value that H decodes.
    """
    load_wall = task["wall_factor"] * task["load_cpu_s"] + 0.5
    start = time.monotonic()
    deadline = start + task_deadline(task)
    cap = task["max_output_bytes"] + 65536
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    hr, hw = os.pipe()
    trusted = (1, os.getppid(), os.getpid())
    harness = os.fork()
    if harness == 0:
        try:
            for fd in (req_r, resp_w, hr):
                os.close(fd)
            harness_main(task, hw, (req_w, resp_r), context, trusted)
        finally:
            os._exit(0)
    for fd in (req_w, resp_r, hw):
        os.close(fd)
    pr, pw = os.pipe()
    # P may not signal the trusted processes: in a pid namespace the zygote is pid 1, so H's pid
    # takes the zygote's place; without one, pid 1 is the host's init and keeps its place
    protected = (1, os.getpid(), harness) if context["pid_ns"] else trusted
    pid = os.fork()
    if pid == 0:
        try:
            os.close(pr)
            os.close(hr)
            program_main(task, pw, context, protected, (req_r, resp_w))
        finally:
            os._exit(0)
    for fd in (req_r, resp_w, pw):
        os.close(fd)
    program, verdict = _Stream(pid, pr, cap), _Stream(harness, hr, 65536)
    # once H has its verdict the program is needed only to explain a call server that went away;
    # otherwise it is stopped (a pipelined call server may still be computing answers never read)
    decided = lambda: verdict.done and not _reports_gone(bytes(verdict.buf))  # noqa: E731
    timed_out = _collect([program, verdict], deadline, min(deadline, start + load_wall + 0.5), decided)
    return {**program.result("p_"), **verdict.result("h_"), "data": program.data(),
            "harness": verdict.data(), "deadline": timed_out, "overflow": program.overflow,
            "killed": program.killed}  # fmt: skip


def task_deadline(task: dict[str, Any]) -> float:
    """Wall-clock seconds a job may take in its runner (mirrors ``ProgramTask.deadline_s``)."""
    wall = task["wall_factor"]
    if task.get("harness") is not None:
        return wall * (task["load_cpu_s"] + 2 * task["test_cpu_s"]) + 2.0
    test_wall = wall * task["test_cpu_s"] + 0.5
    return wall * task["load_cpu_s"] + 0.5 + len(task["exprs"]) * (test_wall + 0.05) + 1.0


class _Stream:
    """One job process and the pipe it reports on, read without blocking up to ``cap`` bytes."""

    def __init__(self, pid: int, fd: int, cap: int) -> None:
        self.pid, self.fd, self.cap = pid, fd, cap
        os.set_blocking(fd, False)
        self.pidfd = os.pidfd_open(pid)
        self.buf = bytearray()
        self.exited = self.eof = self.overflow = self.killed = False
        self.status, self.cpu = 0, 0.0

    @property
    def done(self) -> bool:
        return self.exited or self.eof or self.overflow

    def poll(self, readable: list[int]) -> None:
        if self.pidfd in readable:
            self.exited = True
        self.eof = _drain(self.fd, self.buf, self.cap) or self.eof
        self.overflow = len(self.buf) > self.cap

    def finish(self, grace: float) -> None:
        """Reap the process (killing it if it is still alive after ``grace`` s) and read what is left."""
        if not self.exited:  # EOF comes a moment before the exit is visible: give it time to finish
            select.select([self.pidfd], [], [], grace)
        done, status, usage = os.wait4(self.pid, os.WNOHANG)
        if done == 0:
            self.killed = True
            os.kill(self.pid, signal.SIGKILL)
            _, status, usage = os.wait4(self.pid, 0)
        self.status, self.cpu = status, usage.ru_utime + usage.ru_stime
        _drain(self.fd, self.buf, self.cap)  # bytes written just before the exit
        self.overflow = len(self.buf) > self.cap
        os.close(self.pidfd)
        os.close(self.fd)

    def data(self) -> bytes:
        return bytes(self.buf[: self.cap])

    def result(self, prefix: str) -> dict[str, Any]:
        return {f"{prefix}status": self.status, f"{prefix}cpu": self.cpu, f"{prefix}killed": self.killed}


def _reports_gone(data: bytes) -> bool:
    """True unless ``data`` is a harness report whose status is not ``gone``."""
    try:
        rec = decode(data[4:])
    except (CodecError, RecursionError):
        return True
    return not (type(rec) is tuple and len(rec) == 3 and rec[1] != "gone")


def _collect(streams: list[_Stream], deadline: float, first_deadline: float, decided: Any = None) -> bool:
    """Read every stream until each process is done (or ``decided()`` says the rest is not needed)
    or ``deadline`` passes (True: it passed).

    Until the first stream's first bytes arrive, ``first_deadline`` applies instead.
    """
    timed_out = False
    while not all(s.done for s in streams) and not (decided is not None and decided()):
        limit = first_deadline if not streams[0].buf else deadline
        remaining = limit - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        live = [s for s in streams if not s.done]
        fds = [fd for s in live for fd in (s.fd, s.pidfd)]
        readable, _, _ = select.select(fds, [], [], remaining)
        for s in live:
            s.poll(readable)
    early = decided is not None and decided()
    for s in streams:
        s.finish(0.5 if not (timed_out or s.overflow or early) else 0)
    return timed_out


def _drain(fd: int, data: bytearray, cap: int) -> bool:
    """Read what is available without blocking; True at end of file."""
    while len(data) <= cap:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return False
        if not chunk:
            return True
        data += chunk
    return False


if __name__ == "__main__":
    worker_main(sys.argv[1])
