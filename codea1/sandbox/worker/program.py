"""The untrusted side of a job: the program process P and its per-test children C.

P (forked by the job runner) closes every fd but its report pipe (and, for a check, the two call
pipes), applies rlimits and seccomp F1, executes the program's definitions once under the load
budget, and reports ``("load", status, reason)``.

* Grid job: for each expression P forks C, which adds seccomp F2 and the CPU budget, evaluates the
  expression, encodes the value with the safe codec and writes it to its own pipe. P forwards a
  ``b"T"`` frame (:data:`~codea1.sandbox.worker.value_codec.TEST_RECORD`: index, exit code, CPU seconds,
  wall-killed; then the child's bytes), then an end frame.
* Check job: P forks one call server C (F2, CPU budget for all calls together) that answers the
  harness process's calls of the entry point (:mod:`codea1.sandbox.worker.harness`), then forwards a
  ``b"C"`` frame with C's exit (same head) and an end frame.

Everything P and C write is the candidate's claim about its own return values; the parent decodes
it with the safe codec and checks the shape of the stream (:mod:`codea1.sandbox.tasks`).
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

from codea1.sandbox.worker import isolation
from codea1.sandbox.worker.test_scope import TestScope, question_namespace
from codea1.sandbox.worker.value_codec import (
    END_FRAME,
    RESULT_DIGEST,
    RESULT_RAISE,
    RESULT_UNENCODABLE,
    RESULT_VALUE,
    TEST_RECORD,
    CodecError,
    TooLarge,
    decode,
    digest,
    encode,
    frame,
)  # fmt: skip

REPORT_FD, CALL_REQUEST_FD, CALL_RESPONSE_FD = 3, 4, 5
"""Where a job process keeps its pipes: its report pipe, and (check jobs) the call request and
response pipes (read end in P/C and write end in H for requests; the reverse for responses)."""


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd``."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class FrameReader:
    """Length-prefixed frames from a pipe, read in as few ``read`` calls as the writer allows."""

    def __init__(self, fd: int, cap: int) -> None:
        self.fd, self.cap = fd, cap
        self.buf = bytearray()

    def ready(self) -> bool:
        """True when a whole frame is already buffered."""
        return len(self.buf) >= 4 and len(self.buf) >= 4 + int.from_bytes(self.buf[:4], "little")

    def next(self) -> bytes | None:
        """The next frame's payload; None at end of file; ValueError over ``cap`` or cut short."""
        while True:
            need = 4
            if len(self.buf) >= 4:
                n = int.from_bytes(self.buf[:4], "little")
                if n > self.cap:
                    raise ValueError(f"frame of {n} bytes exceeds {self.cap}")
                if len(self.buf) >= 4 + n:
                    body = bytes(self.buf[4 : 4 + n])
                    del self.buf[: 4 + n]
                    return body
                need = 4 + n
            chunk = os.read(self.fd, max(4096, need - len(self.buf)))
            if not chunk:
                if self.buf:
                    raise ValueError("frame cut short")
                return None
            self.buf += chunk


class CappedSink(io.TextIOBase):
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


def isolate_fds(report_fd: int, call_fds: tuple[int, ...] = ()) -> int:
    """Keep only the report pipe (as fd 3) and the call pipes (as fds 4 and 5); stdin, stdout and
    stderr become the null device. Returns the report fd."""
    wanted = (report_fd, *call_fds)
    parked = [os.dup2(fd, 60 + i) for i, fd in enumerate(wanted)]  # above every target: no clobbering
    for i, fd in enumerate(parked):
        os.dup2(fd, REPORT_FD + i)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(REPORT_FD + len(wanted), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    return REPORT_FD


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
    CappedSink(16).write("warm")
    rng = sys.modules.get("random")
    if rng is not None:
        functools.partial(rng.setstate, rng.getstate())


def program_main(
    task: dict[str, Any],
    report_fd: int,
    context: dict[str, Any],
    protected: tuple[int, int, int],
    call_fds: tuple[int, int] | None = None,
) -> None:
    """Run one job's program (grid: ``call_fds`` None; check: the call pipes); never returns."""
    out = report_fd
    try:
        if context["pid_ns"]:
            os.setsid()
        isolation.set_parent_death_signal(signal.SIGKILL)
        out = isolate_fds(report_fd, call_fds or ())
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
    sys.stdout = sys.stderr = CappedSink()
    load_status, load_reason, ns, question = _load(task)
    _send(out, ("load", load_status, load_reason))
    if load_status == "pass":
        for sig in (signal.SIGPROF, signal.SIGXCPU, signal.SIGALRM):  # undo handlers set by the definitions
            signal.signal(sig, signal.SIG_DFL)
        restore = functools.partial(setstate, getstate()) if rng is not None else None
        gc.freeze()
        if call_fds is not None:
            _serve(task, ns[task["entry_point"]], out, (context["filters"], restore))
        else:
            scope = TestScope(ns, task["entry_point"], question)
            for i, expr in enumerate(task["exprs"]):
                _run_one(i, expr, task, scope, out, (context["filters"], restore))
    write_all(out, END_FRAME)
    os._exit(0)


def _load(task: dict[str, Any]) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """Execute the question's trusted helpers (:func:`question_namespace`), then the program's
    definitions, under the load budget: (status, reason, program namespace, question names)."""
    ns: dict[str, Any] = {"__name__": "__program__", "__builtins__": builtins}
    question: dict[str, Any] = {}
    me = os.getpid()
    signal.setitimer(signal.ITIMER_PROF, task["load_cpu_s"])
    try:
        question = question_namespace(task.get("question_helpers") or "")
        exec(compile(task["source"], "<program>", "exec"), ns)
        if not callable(ns.get(task["entry_point"])):
            return "error", f"entry point {task['entry_point']!r} not defined", ns, question
    except MemoryError:
        return "memory", "MemoryError", ns, question
    except BaseException as e:  # noqa: BLE001 - SystemExit and friends are load failures too
        return "error", type_name(e), ns, question
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        if os.getpid() != me:  # a process forked by the definitions must not report as the program
            os._exit(0)
    return "pass", "", ns, question


def _run_one(
    i: int, expr: str, task: dict[str, Any], scope: TestScope, out: int, setup: tuple[Any, Any]
) -> None:
    r, w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.close(out)
            _child_main(expr, task, scope, w, setup)
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
    write_all(out, frame(b"T" + TEST_RECORD.pack(i, code, cpu, killed) + bytes(data[:cap])))


def _enter_test(task: dict[str, Any], setup: tuple[Any, Any]) -> None:
    """In a fresh test child: F2, the program's random state at fork time, the CPU budget.

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


DIGEST_ABOVE_BYTES = 4 << 20
"""A harness's call answer whose encoding is over this size travels as its digest: decoding tens of
MB in the harness costs more CPU than the check's budget (MBPP/255: four answers of ~50 MB besides
the one of 1.2 GB), while ``marshal`` digests them at C speed on both sides."""


def _result(call: Any, max_bytes: int, digest_above: int | None = None) -> bytes:
    """Run ``call()`` and encode what it did: a value, an exception type name, or why not encodable.

    With ``digest_above`` (a harness's call), a value whose encoding exceeds that many bytes is sent
    as its digest (:func:`value_codec.digest`); the harness compares it with the digest of the value
    it expects."""
    try:
        value = call()
    except BaseException as e:  # noqa: BLE001
        return RESULT_RAISE + _utf8(type_name(e))
    try:
        try:
            return RESULT_VALUE + encode(value, min(max_bytes, digest_above or max_bytes))
        except TooLarge:
            if digest_above is None:
                raise
            return RESULT_DIGEST + digest(value)
    except CodecError as e:
        return RESULT_UNENCODABLE + _utf8(str(e))
    except BaseException as e:  # noqa: BLE001
        return RESULT_RAISE + _utf8(type_name(e))


def _serve(task: dict[str, Any], fn: Any, out: int, setup: tuple[Any, Any]) -> None:
    """Fork the call server C, wait for it, and forward its exit as a ``b"C"`` frame."""
    pid = os.fork()
    if pid == 0:
        try:
            os.close(out)
            _enter_test(task, setup)
            _serve_calls(fn, task["max_output_bytes"])
        finally:
            os._exit(122)
    os.close(CALL_REQUEST_FD)
    os.close(CALL_RESPONSE_FD)
    _, status, usage = os.wait4(pid, 0)
    cpu = usage.ru_utime + usage.ru_stime
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    write_all(out, frame(b"C" + TEST_RECORD.pack(0, code, cpu, False)))


def _serve_calls(fn: Any, max_bytes: int) -> None:
    """Answer the harness's calls until it closes the request pipe: one response frame per call."""
    me = os.getpid()
    requests = FrameReader(CALL_REQUEST_FD, 1 << 26)
    while True:
        try:
            request = requests.next()
        except (OSError, ValueError):
            os._exit(123)
        if request is None:
            os._exit(0)
        try:
            args, kwargs = decode(request)
        except BaseException:  # noqa: BLE001
            os._exit(123)
        _reply(
            CALL_RESPONSE_FD, _result(lambda a=args, k=kwargs: fn(*a, **k), max_bytes, DIGEST_ABOVE_BYTES), me
        )


def _child_main(expr: str, task: dict[str, Any], scope: TestScope, w: int, setup: tuple[Any, Any]) -> None:
    """One test: :func:`_enter_test`, then the expression in its own namespace, where the entry point
    is a guard (:class:`~codea1.sandbox.worker.test_scope.TestScope`); writes one result frame and exits.

    The state is checked once more after the value is encoded: a test that changed it after its
    last call (the encoder's module, say) reports that, not its value."""
    _enter_test(task, setup)
    ballast = shift_heap() if task.get("shift_heap") else None  # kept alive until the child exits
    me = os.getpid()
    try:
        code = compile(expr, "<test>", "eval")
    except BaseException as e:  # noqa: BLE001
        payload = RESULT_RAISE + _utf8(type_name(e))
    else:
        ns = scope.namespace(code)
        change, record = scope.change, scope.record  # bound before any test code runs
        payload = _result(lambda: eval(code, ns), task["max_output_bytes"])  # noqa: S307 - sandboxed
        record(change())
    signal.setitimer(signal.ITIMER_PROF, 0)
    if scope.violation:  # whatever the expression or the entry point made of it, the test changed state
        payload = RESULT_RAISE + _utf8(scope.violation)
    _reply(w, payload, me)
    del ballast
    os._exit(0)


def shift_heap() -> list[object]:
    """Objects that hold one block of every small-object size class (16 to 512 bytes) and a few
    larger ones: while they live, each new object gets another address than it would have got."""
    return [object(), int("1001"), *(bytes(n) for n in range(1, 520, 8)),
            bytearray(4096), bytearray(1 << 18)]  # fmt: skip


def _reply(fd: int, payload: bytes, me: int) -> None:
    """Write one result frame; a process the candidate forked (not ``me``) exits without writing."""
    if os.getpid() != me:
        os._exit(0)
    try:
        write_all(fd, frame(payload))
    except BaseException:  # noqa: BLE001
        os._exit(121)


def _utf8(text: str) -> bytes:
    return text[:300].encode("utf-8", "replace")


def type_name(e: BaseException) -> str:
    try:
        name = type(e).__name__
    except BaseException:  # noqa: BLE001
        return "BaseException"
    return name[:100] if isinstance(name, str) else "BaseException"


def _send(fd: int, record: tuple[Any, ...]) -> None:
    write_all(fd, frame(encode(record, 1 << 24)))
