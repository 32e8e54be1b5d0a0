"""The untrusted side of a job: the program process P and its per-test children C.

P (forked by the job runner) closes every fd but its report pipe, applies rlimits and seccomp F1,
executes the program's definitions once under the load budget, and reports ``("load", status,
reason)``. For each expression it forks C, which adds seccomp F2 and the CPU budget, evaluates the
expression, encodes the value with the safe codec and writes it to its own pipe. P forwards
a ``b"T"`` frame (:data:`~codea1.sandbox.value_codec.TEST_RECORD`: index, exit code, CPU seconds,
wall-killed; then the child's bytes); the parent decodes all of it.
Imports: standard library and the lean sandbox modules only.
"""

from __future__ import annotations

import builtins
import functools
import gc
import io
import os
import resource
import select
import signal
import sys
import time
from typing import Any

from codea1.sandbox import isolation
from codea1.sandbox.value_codec import (
    END_FRAME,
    RESULT_RAISE,
    RESULT_UNENCODABLE,
    RESULT_VALUE,
    TEST_RECORD,
    CodecError,
    encode,
    frame,
)  # fmt: skip


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _CappedSink(io.TextIOBase):
    """A text stream that keeps the first ``cap`` characters and discards the rest."""

    def __init__(self, cap: int = 4096) -> None:
        self.kept: list[str] = []
        self.room = cap

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if self.room > 0:
            piece = str(s)[: self.room]
            self.kept.append(piece)
            self.room -= len(piece)
        return len(s)


def _isolate_fds(report_fd: int) -> int:
    """Keep only the report pipe (as fd 3); stdin/stdout/stderr become the null device."""
    os.dup2(report_fd, 3)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(4, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    return 3


def warm_up() -> None:
    """Do, once in the zygote, the lazy initialisations that every fork would otherwise repeat.

    The first ``compile()`` of a process builds the ``_ast`` node types (about 2.5 ms); the first
    use of the codec, the print sink and the random state cost a little more. Everything here is
    trusted code on constant inputs, so the state every job starts from stays the same.
    """
    ns: dict[str, Any] = {"__builtins__": builtins}
    exec(compile("def _warm(x):\n    return [x, (x,), {x: x}]\n", "<warm>", "exec"), ns)
    eval(compile("_warm(1)", "<warm>", "eval"), ns)
    body = frame(RESULT_VALUE + encode([1, 2.0, "s", b"b", None, (1,), {1: 2}, {3}]))
    frame(b"T" + TEST_RECORD.pack(0, 0, 0.0, False) + body)
    frame(encode(("load", "pass", "")))
    _CappedSink(16).write("warm")
    rng = sys.modules.get("random")
    if rng is not None:
        functools.partial(rng.setstate, rng.getstate())


def program_main(
    task: dict[str, Any], report_fd: int, context: dict[str, Any], protected: tuple[int, int, int]
) -> None:
    out = report_fd
    try:
        if context["pid_ns"]:
            os.setsid()
        isolation.set_parent_death_signal(signal.SIGKILL)
        out = _isolate_fds(report_fd)
        os.chdir(context["scratch"])
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)
        n = len(task["exprs"])
        isolation.apply_program_rlimits(task["memory_mb"], task["load_cpu_s"] + 0.003 * n, task["test_cpu_s"])
        if context["filters"] is not None:
            context["filters"].install_program(protected)
        rng = sys.modules.get("random")  # fork handlers reseed it from urandom: restart it from 0
        if rng is not None:
            rng.seed(0)
            getstate, setstate = rng.getstate, rng.setstate
    except BaseException as e:  # noqa: BLE001
        _send(out, ("load", "error", f"sandbox setup failed: {type(e).__name__}: {e}"))
        os._exit(0)
    sys.stdout = sys.stderr = _CappedSink()
    load_status, load_reason, ns, check = _load(task)
    _send(out, ("load", load_status, load_reason))
    if load_status == "pass":
        for sig in (signal.SIGPROF, signal.SIGXCPU, signal.SIGALRM):  # undo handlers set by the definitions
            signal.signal(sig, signal.SIG_DFL)
        restore = functools.partial(setstate, getstate()) if rng is not None else None
        gc.freeze()
        for i, expr in enumerate(task["exprs"]):
            _run_one(i, expr, task, ns, check, out, (context["filters"], restore))
    _write_all(out, END_FRAME)
    os._exit(0)


def _load(task: dict[str, Any]) -> tuple[str, str, dict[str, Any], Any]:
    """Execute the program's definitions (and the harness, for checks) under the load budget."""
    ns: dict[str, Any] = {"__name__": "__program__", "__builtins__": builtins}
    check = None
    me = os.getpid()
    signal.setitimer(signal.ITIMER_PROF, task["load_cpu_s"])
    try:
        exec(compile(task["source"], "<program>", "exec"), ns)
        if not callable(ns.get(task["entry_point"])):
            return "error", f"entry point {task['entry_point']!r} not defined", ns, None
        if task.get("harness") is not None:
            hns: dict[str, Any] = {"__name__": "__harness__", "__builtins__": builtins}
            try:
                exec(compile(task["harness"], "<harness>", "exec"), hns)
            except BaseException as e:  # noqa: BLE001
                return "error", f"harness did not load: {_type_name(e)}", ns, None
            check = hns.get("check")
            if not callable(check):
                return "error", "harness defines no check()", ns, None
    except MemoryError:
        return "memory", "MemoryError", ns, None
    except BaseException as e:  # noqa: BLE001 - SystemExit and friends are load failures too
        return "error", _type_name(e), ns, None
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        if os.getpid() != me:  # a process forked by the definitions must not report as the program
            os._exit(0)
    return "pass", "", ns, check


def _run_one(
    i: int, expr: str, task: dict[str, Any], ns: dict[str, Any], check: Any, out: int, setup: tuple[Any, Any]
) -> None:
    r, w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.close(out)
            _child_main(expr, task, ns, check, w, setup)
        finally:
            os._exit(122)
    os.close(w)
    wall = task["wall_factor"] * task["test_cpu_s"] + 0.5
    cap = task["max_output_bytes"] + 1024
    data = bytearray()
    killed = False
    while True:
        remaining = start + wall - time.monotonic()
        if remaining <= 0 or len(data) > cap:
            killed = remaining <= 0
            os.kill(pid, signal.SIGKILL)
            break
        readable, _, _ = select.select([r], [], [], remaining)
        if readable:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            data += chunk
    os.close(r)
    _, status, usage = os.wait4(pid, 0)
    cpu = usage.ru_utime + usage.ru_stime
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    _write_all(out, frame(b"T" + TEST_RECORD.pack(i, code, cpu, killed) + bytes(data[:cap])))


def _child_main(
    expr: str, task: dict[str, Any], ns: dict[str, Any], check: Any, w: int, setup: tuple[Any, Any]
) -> None:
    """One test: F2, CPU budget, the program's random state at fork time, then the expression.

    ``setup`` is (prepared seccomp filters or None, restore-random-state callable or None).
    """
    filters, restore = setup
    try:
        if filters is not None:
            filters.install_test(os.getpid())
        if restore is not None:
            restore()
        budget = task["test_cpu_s"]
        cpu = isolation.test_cpu_rlimit(budget)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        signal.setitimer(signal.ITIMER_PROF, budget)
    except BaseException:  # noqa: BLE001
        os._exit(120)
    me = os.getpid()
    try:
        if check is not None:
            value = check(ns[task["entry_point"]])
            payload = RESULT_VALUE + encode(None)
        else:
            value = eval(compile(expr, "<test>", "eval"), ns)
            payload = RESULT_VALUE + encode(value, task["max_output_bytes"])
    except CodecError as e:
        payload = RESULT_UNENCODABLE + _utf8(str(e))
    except BaseException as e:  # noqa: BLE001
        payload = RESULT_RAISE + _utf8(_type_name(e))
    signal.setitimer(signal.ITIMER_PROF, 0)
    if os.getpid() != me:
        os._exit(0)
    try:
        _write_all(w, frame(payload))
    except BaseException:  # noqa: BLE001
        os._exit(121)
    os._exit(0)


def _utf8(text: str) -> bytes:
    return text[:300].encode("utf-8", "replace")


def _type_name(e: BaseException) -> str:
    try:
        name = type(e).__name__
    except BaseException:  # noqa: BLE001
        return "BaseException"
    return name[:100] if isinstance(name, str) else "BaseException"


def _send(fd: int, record: tuple[Any, ...]) -> None:
    _write_all(fd, frame(encode(record, 1 << 24)))
