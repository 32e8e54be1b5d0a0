"""The harness side of a check: the process H that runs an evalplus-style ``check(candidate)``.

A check job has two sandboxed processes, both forked by the job runner R:

* H (this module) executes the harness (the benchmark's ``check`` with its reference and its
  inputs) and calls ``check`` with a :class:`CandidateProxy`;
* P (:mod:`codea1.sandbox.worker.program`) executes the candidate's definitions and forks one call
  server C, which evaluates ``entry_point(*args, **kwargs)`` for each request of H.

The proxy sends each call's arguments to C and receives the returned value in the typed value
encoding (:mod:`value_codec`), decoded here. So everything the harness compares, asserts and
decides runs in H, where candidate code never runs: the candidate only ever ships return values.
A returned value that is not plain data (e.g. an object whose ``__eq__`` always says True) is
refused: the call raises :class:`NotPlainData` and the check fails, even if the harness catches it.
H reports one record, ``("check", status, reason)``, on its own pipe, which only H holds.
"""

from __future__ import annotations

import builtins
import os
import select
import signal
import sys
import time
from typing import Any

from codea1.sandbox.worker import isolation
from codea1.sandbox.worker.program import (
    CALL_REQUEST_FD,
    CALL_RESPONSE_FD,
    CappedSink,
    FrameReader,
    isolate_fds,
    type_name,
    write_all,
)
from codea1.sandbox.worker.value_codec import (
    DIGEST_BYTES,
    RESULT_DIGEST,
    RESULT_RAISE,
    RESULT_UNENCODABLE,
    RESULT_VALUE,
    CodecError,
    decode,
    digest,
    encode,
    frame,
)  # fmt: skip

_PLAIN_SCALARS = (type(None), bool, int, float, complex, str, bytes)
_PLAIN_CONTAINERS = (list, tuple, set, frozenset)


class NotPlainData(Exception):
    """A value that is not plain data was used, or could not reach the other side."""


class CandidateGone(BaseException):
    """The candidate's call server ended, or broke the call protocol (not catchable as Exception)."""


class CandidateRaised(Exception):
    """The candidate raised an exception that is not a builtin exception type."""


_USES = (
    "eq ne lt le gt ge bool len iter contains getitem hash int float index complex str repr format bytes "
    "add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow neg pos abs "
    "and rand or ror xor rxor lshift rshift invert round reversed array"
).split()


class NotPlainValue:
    """Stands for a returned value that is not plain data (an object, a match, a generator...).

    Only its identity may be looked at (``out is None`` / ``is not None``, as MBPP/737's harness
    does with ``re.match`` results). Any other use — comparing it, truth-testing it, converting,
    printing or hashing it — fails the check, even if the harness catches the exception: a value
    whose ``__eq__`` claims equality can never satisfy a harness.
    """

    __slots__ = ("_proxy", "_what")

    def __init__(self, proxy: CandidateProxy, what: str) -> None:
        object.__setattr__(self, "_proxy", proxy)
        object.__setattr__(self, "_what", what)

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        what = object.__getattribute__(self, "_what")
        object.__getattribute__(self, "_proxy")._fail(
            "fail", f"used a returned value that is not plain data ({what})"
        )
        raise NotPlainData(f"the candidate returned a value that is not plain data ({what})")


for _name in _USES:
    setattr(NotPlainValue, f"__{_name}__", NotPlainValue._refuse)


class EncodedDigest:
    """Stands for a returned value too large to ship (its encoding is over ``max_output_bytes``:
    MBPP/255's combinations are over 1 GB): the digest of its encoding, made by the call server.

    It equals a value exactly when that value, encoded here in H, has the same digest
    (:func:`value_codec.digest`: SHA-256 and length of the canonical encoding), so the candidate
    can match an expected value only by producing it: the digest is of no use without the value.
    Equality is of encodings, so it is stricter than ``==`` where ``==`` is loose (sets and dicts
    built in another order, ``0.0`` and ``-0.0``, ``1`` and ``1.0`` differ) and a tolerance
    comparison (``np.allclose``) fails. Any other use fails the check, as for
    :class:`NotPlainValue`.
    """

    __slots__ = ("_proxy", "_digest", "_last")

    def __init__(self, proxy: CandidateProxy, value_digest: bytes) -> None:
        object.__setattr__(self, "_proxy", proxy)
        object.__setattr__(self, "_digest", value_digest)
        object.__setattr__(self, "_last", None)

    def __eq__(self, other: object) -> bool:
        if type(other) is EncodedDigest:
            return object.__getattribute__(self, "_digest") == object.__getattribute__(other, "_digest")
        last = object.__getattribute__(self, "_last")
        if last is not None and last[0] is other:  # `out != exp` then `out == exp`: digest once
            theirs = last[1]
        else:
            try:
                theirs = digest(other)
            except (CodecError, RecursionError):
                theirs = b""
            object.__setattr__(self, "_last", (other, theirs))  # holds `other`: its id stays its own
        return theirs == object.__getattribute__(self, "_digest")

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        object.__getattribute__(self, "_proxy")._fail("fail", "used a returned value too large to ship")
        raise NotPlainData("the candidate returned a value too large to ship; only == can compare it")


for _name in _USES:
    if _name not in ("eq", "ne"):
        setattr(EncodedDigest, f"__{_name}__", EncodedDigest._refuse)


def is_plain(value: Any) -> bool:
    """True when ``value`` is plain data throughout (exact builtin types, no other objects)."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t in _PLAIN_SCALARS:
            continue
        if t in _PLAIN_CONTAINERS:
            stack.extend(v)
        elif t is dict:
            stack.extend(v.keys())
            stack.extend(v.values())
        else:
            return False
    return True


class CandidateProxy:
    """Stands for the candidate's entry point inside the harness: each call runs in the call server.

    ``failure`` records the first event that must fail the check whatever the harness does with
    the exception it sees (a refused value, the server gone, a protocol breach, MemoryError, the
    wall-clock backstop). ``wall_s`` is the wall time the candidate may take over all its calls
    (a sleeping candidate uses no CPU, so its CPU budget alone would not end it).
    """

    PIPELINE_BYTES = 32 << 10
    """Request bytes that may wait in the request pipe (under its 64 KiB, so writes never block)."""

    def __init__(self, max_bytes: int, wall_s: float, planned: tuple[bytes, ...] = ()) -> None:
        self.max_bytes = max_bytes
        self.answers = FrameReader(CALL_RESPONSE_FD, max_bytes + 1024)
        self.wall_left = wall_s
        self.failure: tuple[str, str] | None = None
        self.planned = planned
        """Requests known in advance (:mod:`codea1.sandbox.call_plan`), sent ahead of the calls."""
        self.sent = self.made = 0
        self.in_flight: list[int] = []

    def _send_ahead(self) -> None:
        """Send planned requests while the pipe has room; the first one always goes."""
        while self.sent < len(self.planned):
            size = len(self.planned[self.sent]) + 4
            if self.in_flight and sum(self.in_flight) + size > self.PIPELINE_BYTES:
                return
            write_all(CALL_REQUEST_FD, frame(self.planned[self.sent]))
            self.in_flight.append(size)
            self.sent += 1

    def _fail(self, status: str, reason: str) -> None:
        if self.failure is None:
            self.failure = (status, reason)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.failure is not None and self.failure[0] in ("gone", "timeout", "error"):
            raise CandidateGone(self.failure[1])
        request = (list(args), dict(kwargs))
        if not is_plain(request):
            raise NotPlainData("a call argument is not plain data and cannot reach the candidate")
        payload = encode(request, 1 << 26)
        start = time.monotonic()
        try:
            if self.made < len(self.planned) and self.planned[self.made] == payload:
                self._send_ahead()
                self.in_flight.pop(0)
            elif self.sent > self.made:  # answers to requests this call is not: the plan was wrong
                self._fail("error", "harness calls differ from its planned inputs")
                raise CandidateGone("harness calls differ from its planned inputs")
            else:
                self.planned = ()
                write_all(CALL_REQUEST_FD, frame(payload))
            self.made += 1
            if not self.answers.ready():
                ready, _, _ = select.select([CALL_RESPONSE_FD], [], [], max(self.wall_left, 0.0))
                if not ready:
                    self._fail("timeout", "wall-clock backstop")
                    raise CandidateGone("wall-clock backstop")
            response = self.answers.next()
            self.wall_left -= time.monotonic() - start
        except (OSError, ValueError) as e:
            self._fail("error", f"protocol violation: call answer broken ({type(e).__name__})")
            raise CandidateGone("protocol violation") from None
        if response is None:
            self._fail("gone", "candidate process ended")
            raise CandidateGone("candidate process ended")
        kind, body = response[:1], response[1:]
        if kind == RESULT_VALUE:
            try:
                value = decode(body)
            except (CodecError, RecursionError):
                self._fail("error", "protocol violation: undecodable call answer")
                raise CandidateGone("protocol violation") from None
            if not is_plain(value):
                what = getattr(value, "type_name", None) or getattr(value, "qualname", None)
                return NotPlainValue(self, str(what or type(value).__name__)[:100])
            return value
        if kind == RESULT_DIGEST:
            if len(body) != DIGEST_BYTES:
                self._fail("error", "protocol violation: malformed digest answer")
                raise CandidateGone("protocol violation")
            return EncodedDigest(self, bytes(body))
        if kind == RESULT_UNENCODABLE:
            self._fail("fail", "unencodable value")
            raise NotPlainData("the candidate returned a value that cannot be encoded")
        if kind == RESULT_RAISE:
            name = body[:100].decode("utf-8", "replace")
            if name == "MemoryError":
                self._fail("memory", "MemoryError")
            exc = getattr(builtins, name, None)
            if isinstance(exc, type) and issubclass(exc, BaseException):
                raise exc(f"raised by the candidate ({name})")
            raise CandidateRaised(name)
        self._fail("error", "protocol violation: unknown kind of call answer")
        raise CandidateGone("protocol violation")


def harness_main(task: dict[str, Any], report_fd: int, call_fds: tuple[int, int], context: dict[str, Any],
                 protected: tuple[int, int, int]) -> None:  # fmt: skip
    """Run ``check(proxy)`` once and report ``("check", status, reason)``; never returns."""
    out = report_fd
    try:
        isolation.set_parent_death_signal(signal.SIGKILL)
        out = isolate_fds(report_fd, call_fds)
        os.chdir(context["scratch"])
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)
        budget = task["load_cpu_s"] + task["test_cpu_s"]
        isolation.apply_program_rlimits(task["memory_mb"], budget, task["test_cpu_s"])
        if context["filters"] is not None:
            context["filters"].install_program(protected)
    except BaseException as e:  # noqa: BLE001
        _report(out, "error", f"sandbox setup failed: {type(e).__name__}: {e}")
        os._exit(0)
    sys.stdout = sys.stderr = CappedSink()
    wall = task["wall_factor"] * task["test_cpu_s"] + 0.5
    proxy = CandidateProxy(task["max_output_bytes"], wall, tuple(task.get("planned") or ()))
    ns: dict[str, Any] = {"__name__": "__harness__", "__builtins__": builtins, task["entry_point"]: proxy}
    signal.setitimer(signal.ITIMER_PROF, budget)
    status, reason = _run_harness(task["harness"], ns, proxy)
    signal.setitimer(signal.ITIMER_PROF, 0)
    if proxy.failure is not None:  # whatever the harness made of it, the check did not pass
        status, reason = proxy.failure
    _report(out, status, reason)
    os._exit(0)


def _run_harness(harness: str, ns: dict[str, Any], proxy: CandidateProxy) -> tuple[str, str]:
    """Execute the harness and call its ``check``: ("pass" | "fail" | "error", reason)."""
    try:
        exec(compile(harness, "<harness>", "exec"), ns)
    except BaseException as e:  # noqa: BLE001
        return "error", f"harness did not load: {type_name(e)}"
    check = ns.get("check")
    if not callable(check):
        return "error", "harness defines no check()"
    try:
        check(proxy)
    except BaseException as e:  # noqa: BLE001 - whatever the check raised, it did not pass
        return "fail", type_name(e)
    return "pass", ""


def _report(fd: int, status: str, reason: str) -> None:
    write_all(fd, frame(encode(("check", status, reason[:300]), 1 << 16)))
