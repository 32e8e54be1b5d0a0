"""The sandbox worker: a trusted zygote that forks, per job, a runner, a program and per-test children.

Process tree of one worker (research/sandbox.md §5)::

    outer (joins the worker cgroups, unshares net/mount/pid namespaces, waits)
    └── zygote (pid 1 of the new pid namespace; tmpfs scratch, scrubbed env, Landlock; never runs
        │       user code and never holds job data, so every fork starts clean)
        └── runner R (one per job: reads the job from the parent, writes the result back)
            └── program P (rlimits + seccomp F1; executes the definitions once)
                └── test child C (one per expression: seccomp F2, CPU itimer; encodes the value)

After each job the zygote SIGKILLs every other process in its namespace and wipes the scratch
dir. Values cross from C to P to R as frames of :mod:`value_codec` bytes; the parent decodes them.
Messages between the parent and R are length-prefixed ``marshal`` dumps of plain dicts (trusted to
trusted only; ``marshal`` needs no native library, unlike ``pickle``).
Imports: standard library and the lean sandbox modules only (no numpy/torch here).
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

from codea1.sandbox import isolation, landlock, seccomp
from codea1.sandbox.program import program_main, warm_up
from codea1.sandbox.value_codec import end_offset

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
    isolation.setup_mounts(layers, scratch, plan["scratch_mb"])
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
        ro, rw = isolation.confinement_paths(scratch, plan["site_dirs"])
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
        result = _run_program(task, context)
        write_message(1, result)
    except BaseException as e:  # noqa: BLE001 - reported by the zygote as a runner failure
        try:
            os.write(2, f"runner: {type(e).__name__}: {e}\n".encode())
        finally:
            os._exit(1)
    os._exit(0)


def _run_program(task: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    n = len(task["exprs"])
    test_wall = task["wall_factor"] * task["test_cpu_s"] + 0.5
    load_wall = task["wall_factor"] * task["load_cpu_s"] + 0.5
    start = time.monotonic()
    deadline = start + load_wall + n * (test_wall + 0.05) + 1.0
    # until the first frame (the load report) arrives, the definitions' own wall backstop applies:
    # P's CPU hard limit leaves room for its tests' limits, so it is not the load's backstop
    load_deadline = min(deadline, start + load_wall + 0.5)
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
    os.set_blocking(r, False)
    pidfd = os.pidfd_open(pid)
    data = bytearray()
    scanned, ended, exited, overflow, timed_out = 0, False, False, False, False
    while not ended and not overflow:
        remaining = (deadline if scanned or ended else load_deadline) - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        readable, _, _ = select.select([r, pidfd], [], [], remaining)
        if pidfd in readable:
            exited = True
        got_eof = _drain(r, data, cap)
        overflow = len(data) > cap
        scanned, ended = end_offset(data, scanned)
        if exited or got_eof:
            break
    if not exited:  # EOF comes a moment before the exit is visible: give the process time to finish
        select.select([pidfd], [], [], 0.5 if not (timed_out or overflow) else 0)
    done, status, usage = os.wait4(pid, os.WNOHANG)
    killed = done == 0
    if killed:
        os.kill(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
    os.close(pidfd)
    os.close(r)
    return {
        "data": bytes(data[:cap]),
        "p_status": status,
        "p_cpu": usage.ru_utime + usage.ru_stime,
        "deadline": timed_out,
        "overflow": overflow,
        "killed": killed,
    }


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
