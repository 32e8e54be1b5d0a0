"""Program tasks sent to workers, and the trusted parsing of what comes back.

A :class:`ProgramTask` is one program (its definitions executed once) plus the expressions to
evaluate, each in its own fork, or (with a ``harness``) one check run by the harness process. The
worker's answer is raw bytes produced by untrusted processes; :func:`parse_result` decodes them
with the safe codec only and turns them into one :class:`ProgramOutcome` (load status + one
:class:`ExprOutcome` per expression). The stream must have exactly the shape the trusted code
writes (one load report, then one report per test in order, then the end frame, then nothing);
anything else is a protocol violation and the whole program counts as an ``error``, so extra,
duplicated or reordered records written by the candidate can never stand in for real ones.
"""

from __future__ import annotations

import math
import os
import signal
import struct
from dataclasses import dataclass
from typing import Any, Literal

from codea1.config import SandboxConfig
from codea1.sandbox.worker.value_codec import (
    RESULT_RAISE,
    RESULT_UNENCODABLE,
    RESULT_VALUE,
    TEST_RECORD,
    CodecError,
    decode,
)  # fmt: skip

ExprKind = Literal["value", "raise", "timeout", "memory", "unencodable", "error"]
LoadStatus = Literal["pass", "error", "timeout", "memory"]
_TIMEOUT_SIGNALS = {signal.SIGPROF, signal.SIGXCPU, signal.SIGVTALRM}
MAX_CPU_S = 3600.0
"""Largest CPU budget accepted for a program's definitions or for one expression."""


def budget_problems(load_cpu_s: float, test_cpu_s: float, wall_factor: float, memory_mb: int,
                    max_output_bytes: int) -> list[str]:  # fmt: skip
    """Why these budgets cannot be enforced (empty when they can)."""
    out = []
    for name, value in (("load_cpu_s", load_cpu_s), ("test_cpu_s", test_cpu_s)):
        if not (isinstance(value, int | float) and math.isfinite(value) and 0 < value <= MAX_CPU_S):
            out.append(f"{name} must be a number of seconds in (0, {MAX_CPU_S:g}], got {value!r}")
    if not (isinstance(wall_factor, int | float) and math.isfinite(wall_factor) and 1 <= wall_factor <= 100):
        out.append(
            f"wall_factor must be in [1, 100] (the wall backstop may not undercut the CPU budget), got {wall_factor!r}"
        )
    if not (isinstance(memory_mb, int) and 64 <= memory_mb <= 1 << 20):
        out.append(f"memory_mb must be an integer in [64, {1 << 20}], got {memory_mb!r}")
    if not (isinstance(max_output_bytes, int) and 64 <= max_output_bytes <= 1 << 26):
        out.append(f"max_output_bytes must be an integer in [64, {1 << 26}], got {max_output_bytes!r}")
    return out


def check_config(cfg: SandboxConfig) -> None:
    """Raise ValueError when ``cfg``'s budgets cannot be enforced."""
    problems = budget_problems(
        cfg.load_cpu_s, cfg.test_cpu_s, cfg.wall_factor, cfg.memory_mb, cfg.max_output_bytes
    )
    if problems:
        raise ValueError("sandbox config: " + "; ".join(problems))


@dataclass(frozen=True)
class ProgramTask:
    """One program and the expressions to evaluate against its post-definition state."""

    source: str
    entry_point: str
    exprs: tuple[str, ...]
    harness: str | None = None
    planned: tuple[bytes, ...] = ()
    """For a check: the encoded call requests known in advance (:mod:`codea1.sandbox.call_plan`)."""
    load_cpu_s: float = 2.0
    test_cpu_s: float = 1.0
    wall_factor: float = 3.0
    memory_mb: int = 2048
    max_output_bytes: int = 65536
    shift_heap: bool = False
    """Evaluate each expression after taking memory of every small-object size, so that the objects
    it makes get other addresses than in a plain run (the oracle's second run on the reference's
    variant: :mod:`codea1.sandbox.reference_variant`)."""
    question_helpers: str = ""
    """The question's own imports and helper functions (``GridJob.question_helpers``): trusted source
    the program process executes before the program, whose names each test's namespace takes in place
    of the program's (:mod:`codea1.sandbox.worker.test_scope`)."""

    def __post_init__(self) -> None:
        problems = budget_problems(
            self.load_cpu_s, self.test_cpu_s, self.wall_factor, self.memory_mb, self.max_output_bytes
        )
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def make(
        cls, source: str, entry_point: str, exprs: tuple[str, ...], cfg: SandboxConfig, **kw: Any
    ) -> ProgramTask:
        """A task with the budgets of ``cfg`` (keyword arguments override them)."""
        budgets = {
            "load_cpu_s": cfg.load_cpu_s, "test_cpu_s": cfg.test_cpu_s, "wall_factor": cfg.wall_factor,
            "memory_mb": cfg.memory_mb, "max_output_bytes": cfg.max_output_bytes,
        }  # fmt: skip
        budgets.update(kw)
        return cls(source=source, entry_point=entry_point, exprs=exprs, **budgets)

    def message(self) -> dict[str, Any]:
        """The plain dict sent to the worker."""
        return {
            "source": self.source, "entry_point": self.entry_point, "exprs": list(self.exprs),
            "harness": self.harness, "planned": list(self.planned), "load_cpu_s": self.load_cpu_s,
            "test_cpu_s": self.test_cpu_s,
            "wall_factor": self.wall_factor, "memory_mb": self.memory_mb,
            "max_output_bytes": self.max_output_bytes, "shift_heap": self.shift_heap,
            "question_helpers": self.question_helpers,
        }  # fmt: skip

    def deadline_s(self) -> float:
        """Wall-clock seconds after which the worker running this task counts as stuck.

        A check's harness and call server each get the CPU budget ``test_cpu_s``; they take turns.
        """
        if self.harness is not None:
            return self.wall_factor * (self.load_cpu_s + 2 * self.test_cpu_s) + 2.0
        test_wall = self.wall_factor * self.test_cpu_s + 0.5
        return self.wall_factor * self.load_cpu_s + 0.5 + len(self.exprs) * (test_wall + 0.05) + 1.0


@dataclass(frozen=True)
class ExprOutcome:
    """What one expression did: returned a ``value``, raised, ran out of a budget, or failed."""

    kind: ExprKind
    reason: str = ""
    value: Any = None


@dataclass(frozen=True)
class ProgramOutcome:
    """A program's load status and, when it loaded, one outcome per expression."""

    load_status: LoadStatus
    load_reason: str
    exprs: tuple[ExprOutcome, ...]


def failed_outcome(task: ProgramTask, reason: str) -> ProgramOutcome:
    """The outcome of a task whose worker died or got stuck."""
    return ProgramOutcome("error", reason, tuple(ExprOutcome("error", reason) for _ in task.exprs))


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _classify_dead_child(code: int, cpu: float, killed: bool, budget: float) -> ExprOutcome:
    if killed:
        return ExprOutcome("timeout", "wall-clock backstop")
    if code < 0:
        sig = -code
        if sig in _TIMEOUT_SIGNALS:
            return ExprOutcome("timeout", "cpu budget")
        if sig == signal.SIGKILL:
            if cpu >= budget:
                return ExprOutcome("timeout", "cpu budget (kernel limit)")
            return ExprOutcome("memory", "killed (memory limit)")
        return ExprOutcome("error", f"crashed ({_signal_name(sig)})")
    if code == 120:
        return ExprOutcome("error", "sandbox setup failed in the test process")
    return ExprOutcome("error", f"exited without a result (exit code {code})")


_U32 = struct.Struct("<I")


def read_stream(data: bytes) -> tuple[list[bytes], bool, str]:
    """Frame payloads up to the end frame: ``(payloads, ended, problem)``.

    ``problem`` is non-empty when bytes follow the end frame. A tail cut short without an end
    frame is not a problem (the writer was killed mid-write); it is dropped.
    """
    out: list[bytes] = []
    pos = 0
    while pos + 4 <= len(data):
        n = _U32.unpack_from(data, pos)[0]
        if n == 0:
            return out, True, "bytes after the end frame" if pos + 4 != len(data) else ""
        if pos + 4 + n > len(data):
            break
        out.append(bytes(data[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    return out, False, ""


def _child_result(child_bytes: bytes) -> tuple[bytes | None, str]:
    """A test child's one result frame (None if it wrote none), or a protocol problem."""
    frames, ended, problem = read_stream(child_bytes)
    if ended or problem or len(frames) > 1:
        return None, "the test process wrote more than one result"
    if frames and 4 + len(frames[0]) != len(child_bytes):
        return None, "the test process wrote more than one result"
    return (frames[0] if frames else None), ""


def _expr_outcome(head: tuple[int, int, float, bool], child_bytes: bytes, budget: float) -> ExprOutcome:
    _, code, cpu, killed = head
    payload, problem = _child_result(child_bytes)
    if problem:
        return ExprOutcome("error", f"protocol violation: {problem}")
    if payload is not None:
        kind, body = payload[:1], payload[1:]
        if kind == RESULT_VALUE:
            try:
                return ExprOutcome("value", value=decode(body))
            except (CodecError, RecursionError):
                return ExprOutcome("unencodable", "unencodable value")
        if kind in (RESULT_RAISE, RESULT_UNENCODABLE):
            text = body[:300].decode("utf-8", "replace")
            if kind == RESULT_UNENCODABLE:
                return ExprOutcome("unencodable", f"unencodable value: {text}")
            if text == "MemoryError":
                return ExprOutcome("memory", "MemoryError")
            return ExprOutcome("raise", text)
        return ExprOutcome("error", "protocol violation: unknown result kind")
    return _classify_dead_child(code, cpu, killed, budget)


def _record(payload: bytes, tag: bytes, n: int) -> tuple[tuple[int, int, float, bool], bytes] | None:
    """A program's ``tag`` frame (``b"T"`` or ``b"C"``) → (head, child bytes), or None when malformed."""
    if payload[:1] != tag or len(payload) < 1 + TEST_RECORD.size:
        return None
    head = TEST_RECORD.unpack_from(payload, 1)
    if not (head[0] < n and math.isfinite(head[2])):
        return None
    return head, payload[1 + TEST_RECORD.size :]


def _load_record(payload: bytes) -> tuple[LoadStatus, str] | None:
    try:
        rec = decode(payload)
    except (CodecError, RecursionError):
        return None
    if type(rec) is tuple and len(rec) == 3 and rec[0] == "load" and rec[1] in ("pass", "error", "memory"):
        if type(rec[2]) is str:
            return rec[1], rec[2][:300]
    return None


def _load_from_status(raw: dict[str, Any], task: ProgramTask) -> tuple[LoadStatus, str]:
    status = raw.get("p_status")
    if raw.get("deadline"):
        return "timeout", "program deadline"
    if raw.get("overflow"):
        return "error", "program output cap exceeded"
    if raw.get("killed"):
        return "error", "program stopped reporting (closed its pipe)"
    if isinstance(status, int) and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in _TIMEOUT_SIGNALS:
            return "timeout", "cpu budget"
        if sig == signal.SIGKILL:
            if float(raw.get("p_cpu", 0.0)) >= task.load_cpu_s:
                return "timeout", "cpu budget (kernel limit)"
            return "memory", "killed (memory limit)"
        return "error", f"crashed ({_signal_name(sig)})"
    return "error", "program exited without reporting"


def _violation(task: ProgramTask, what: str) -> ProgramOutcome:
    reason = f"protocol violation: {what}"
    return ProgramOutcome("error", reason, tuple(ExprOutcome("error", reason) for _ in task.exprs or ("",)))


def _program_records(
    task: ProgramTask, raw: dict[str, Any], tag: bytes, n: int
) -> tuple[tuple[LoadStatus, str], list[tuple[tuple[int, int, float, bool], bytes]], bool] | str:
    """Check the shape of the program's stream: load report, then ``tag`` records 0, 1, ... in
    order, then the end frame. Returns (load, records, ended), or the violation as text."""
    frames, ended, problem = read_stream(raw.get("data", b""))
    if problem:
        return problem
    if not frames:
        if ended:
            return "end frame without a load report"
        return _load_from_status(raw, task), [], False
    load = _load_record(frames[0])
    if load is None:
        return "the first record is not a load report"
    records = []
    for k, payload in enumerate(frames[1:]):
        rec = _record(payload, tag, n)
        if rec is None or rec[0][0] != k:
            return f"record {k + 1} is not the report of test {k}"
        records.append(rec)
    if load[0] != "pass" and records:
        return "test reports from a program that did not load"
    if ended and load[0] == "pass" and len(records) != n:
        return f"end frame after {len(records)} of {n} test reports"
    return load, records, ended


def parse_result(task: ProgramTask, raw: dict[str, Any]) -> ProgramOutcome:
    """Turn a worker's raw answer into a :class:`ProgramOutcome` (trusted-side decoding only)."""
    if "error" in raw:
        return failed_outcome(task, str(raw["error"]))
    if task.harness is not None:
        return _parse_check(task, raw)
    shape = _program_records(task, raw, b"T", len(task.exprs))
    if isinstance(shape, str):
        return _violation(task, shape)
    load, records, _ = shape
    if load[0] != "pass":
        return ProgramOutcome(
            load[0], load[1], tuple(ExprOutcome("error", "code did not load") for _ in task.exprs)
        )
    results = [_expr_outcome(head, child, task.test_cpu_s) for head, child in records]
    missing = ExprOutcome("timeout", "program deadline") if raw.get("deadline") else None
    if missing is None:
        dead = _load_from_status({**raw, "deadline": False}, task)
        missing = ExprOutcome("error", f"no result (program process: {dead[1]})")
    if raw.get("overflow"):
        missing = ExprOutcome("unencodable", "unencodable value: output cap exceeded")
    results += [missing] * (len(task.exprs) - len(results))
    return ProgramOutcome("pass", "", tuple(results))


def _harness_report(raw: dict[str, Any]) -> tuple[str, str] | None:
    """The harness process's ``("check", status, reason)``, or None when it did not report."""
    frames, ended, _ = read_stream(raw.get("harness", b""))
    if len(frames) != 1 or ended:
        return None
    try:
        rec = decode(frames[0])
    except (CodecError, RecursionError):
        return None
    if type(rec) is tuple and len(rec) == 3 and rec[0] == "check" and type(rec[2]) is str:
        if rec[1] in ("pass", "fail", "timeout", "memory", "error", "gone"):
            return rec[1], rec[2]
    return None


def _parse_check(task: ProgramTask, raw: dict[str, Any]) -> ProgramOutcome:
    """A check's outcome: the verdict is the harness process's; the program only explains a failure.

    ``exprs`` holds one outcome: ``value`` (the check passed), ``raise`` (it failed; reason: what
    it raised), ``timeout``, ``memory`` or ``error``.
    """
    shape = _program_records(task, raw, b"C", 1)
    if isinstance(shape, str):
        return _violation(task, shape)
    load, records, _ = shape
    if load[0] != "pass":
        return ProgramOutcome(load[0], load[1], (ExprOutcome("error", "code did not load"),))
    report = _harness_report(raw)
    if report is None:
        return ProgramOutcome("pass", "", (_harness_death(raw, task),))
    status, reason = report
    if status == "pass":
        return ProgramOutcome("pass", "", (ExprOutcome("value"),))
    if status == "fail":
        return ProgramOutcome("pass", "", (ExprOutcome("raise", reason),))
    if status in ("timeout", "memory", "error"):
        return ProgramOutcome("pass", "", (ExprOutcome(status, reason),))
    # the candidate's call server went away: its exit, as its parent saw it, says why
    if records:
        head, _ = records[0]
        return ProgramOutcome("pass", "", (_classify_dead_child(head[1], head[2], head[3], task.test_cpu_s),))
    if raw.get("deadline"):
        return ProgramOutcome("pass", "", (ExprOutcome("timeout", "program deadline"),))
    dead = _load_from_status({**raw, "deadline": False}, task)
    return ProgramOutcome("pass", "", (ExprOutcome("error", f"no result (program process: {dead[1]})"),))


def _harness_death(raw: dict[str, Any], task: ProgramTask) -> ExprOutcome:
    """Why the harness process gave no verdict: the deadline, its CPU budget, memory, or a crash."""
    if raw.get("deadline"):
        return ExprOutcome("timeout", "check deadline")
    status = raw.get("h_status")
    if isinstance(status, int) and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in _TIMEOUT_SIGNALS:
            return ExprOutcome("timeout", "cpu budget (harness)")
        if sig == signal.SIGKILL:
            budget = task.load_cpu_s + task.test_cpu_s
            if float(raw.get("h_cpu", 0.0)) >= budget:
                return ExprOutcome("timeout", "cpu budget (harness, kernel limit)")
            return ExprOutcome("memory", "killed (memory limit, harness)")
        return ExprOutcome("error", f"harness crashed ({_signal_name(sig)})")
    return ExprOutcome("error", "harness exited without a verdict")
