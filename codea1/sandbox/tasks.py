"""Program tasks sent to workers, and the trusted parsing of what comes back.

A :class:`ProgramTask` is one program (its definitions executed once) plus the expressions to
evaluate, each in its own fork. The worker's answer is raw bytes produced by untrusted processes;
:func:`parse_result` decodes them with the safe codec only and turns them into one
:class:`ProgramOutcome` (load status + one :class:`ExprOutcome` per expression). Anything missing,
malformed or duplicated is classified conservatively (never a pass).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Any, Literal

from codea1.config import SandboxConfig
from codea1.sandbox.value_codec import CodecError, decode, split_frames

ExprKind = Literal["value", "raise", "timeout", "memory", "unencodable", "error"]
LoadStatus = Literal["pass", "error", "timeout", "memory"]
_TIMEOUT_SIGNALS = {signal.SIGPROF, signal.SIGXCPU, signal.SIGVTALRM}


@dataclass(frozen=True)
class ProgramTask:
    """One program and the expressions to evaluate against its post-definition state."""

    source: str
    entry_point: str
    exprs: tuple[str, ...]
    harness: str | None = None
    load_cpu_s: float = 2.0
    test_cpu_s: float = 1.0
    wall_factor: float = 3.0
    memory_mb: int = 2048
    max_output_bytes: int = 65536

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
            "harness": self.harness, "load_cpu_s": self.load_cpu_s, "test_cpu_s": self.test_cpu_s,
            "wall_factor": self.wall_factor, "memory_mb": self.memory_mb,
            "max_output_bytes": self.max_output_bytes,
        }  # fmt: skip

    def deadline_s(self) -> float:
        """Wall-clock seconds after which the worker running this task counts as stuck."""
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


def _expr_outcome(record: tuple[Any, ...], budget: float) -> ExprOutcome:
    _, _, code, cpu, killed, child_bytes = record
    payloads, _ = split_frames(child_bytes, max_frames=1)
    if payloads:
        try:
            msg = decode(payloads[0])
        except CodecError:
            msg = None
        if type(msg) is tuple and len(msg) == 2 and type(msg[1]) in (str, bytes):
            kind, body = msg
            if kind == "ok" and type(body) is bytes:
                try:
                    return ExprOutcome("value", value=decode(body))
                except (CodecError, RecursionError):
                    return ExprOutcome("unencodable", "unencodable value")
            if kind == "raise" and type(body) is str:
                if body == "MemoryError":
                    return ExprOutcome("memory", "MemoryError")
                return ExprOutcome("raise", body)
            if kind == "unencodable" and type(body) is str:
                return ExprOutcome("unencodable", f"unencodable value: {body}")
    return _classify_dead_child(code, cpu, killed, budget)


def _valid_test_record(rec: Any, n: int) -> bool:
    return (
        type(rec) is tuple and len(rec) == 6 and rec[0] == "test" and type(rec[1]) is int
        and 0 <= rec[1] < n and type(rec[2]) is int and type(rec[3]) is float and type(rec[4]) is bool
        and type(rec[5]) is bytes
    )  # fmt: skip


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


def parse_result(task: ProgramTask, raw: dict[str, Any]) -> ProgramOutcome:
    """Turn a worker's raw answer into a :class:`ProgramOutcome` (trusted-side decoding only)."""
    if "error" in raw:
        return failed_outcome(task, str(raw["error"]))
    payloads, _ = split_frames(raw.get("data", b""))
    load: tuple[LoadStatus, str] | None = None
    results: dict[int, ExprOutcome] = {}
    for payload in payloads:
        try:
            rec = decode(payload)
        except (CodecError, RecursionError):
            continue
        if load is None:
            if (
                type(rec) is tuple
                and len(rec) == 3
                and rec[0] == "load"
                and rec[1] in ("pass", "error", "memory")
            ):
                load = (rec[1], str(rec[2])[:300])
            continue
        if _valid_test_record(rec, len(task.exprs)) and rec[1] not in results:
            results[rec[1]] = _expr_outcome(rec, task.test_cpu_s)
    if load is None:
        load = _load_from_status(raw, task)
    if load[0] != "pass":
        return ProgramOutcome(
            load[0], load[1], tuple(ExprOutcome("error", "code did not load") for _ in task.exprs)
        )
    missing = ExprOutcome("timeout", "program deadline") if raw.get("deadline") else None
    if missing is None:
        dead = _load_from_status({**raw, "deadline": False}, task)
        missing = ExprOutcome("error", f"no result (program process: {dead[1]})")
    if raw.get("overflow"):
        missing = ExprOutcome("unencodable", "unencodable value: output cap exceeded")
    return ProgramOutcome("pass", "", tuple(results.get(i, missing) for i in range(len(task.exprs))))
