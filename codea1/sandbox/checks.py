"""CheckJob → Verdict: run an evalplus-style harness's ``check(candidate)`` against one program.

The harness runs in its own process (H, :mod:`codea1.sandbox.worker.harness`) with a proxy for the
candidate; the candidate's definitions run in the program process, whose call server answers each
call with the returned value in the typed encoding. The verdict is what the harness decided in H:
candidate code never runs where the harness compares, asserts or reports.
"""

from __future__ import annotations

from codea1.config import SandboxConfig
from codea1.sandbox.call_plan import planned_requests
from codea1.sandbox.tasks import ProgramOutcome, ProgramTask
from codea1.types import CheckJob, Verdict

HARNESS_LOAD_CPU_S = 10.0
"""Extra CPU budget for loading a harness (evalplus harnesses hold large literal input lists)."""
CHECK_VALUE_BYTES = 1 << 26
"""Largest encoded value one call may return to the harness (HumanEval/14's prefixes of long
strings and MBPP/255's combinations are megabytes; grid tests keep ``max_output_bytes``)."""


def check_task(job: CheckJob, cfg: SandboxConfig) -> ProgramTask:
    """The program task that runs ``job``'s harness once; ValueError when its budget is unusable."""
    try:
        return ProgramTask.make(
            job.code, job.entry_point, ("check",), cfg, harness=job.harness,
            planned=planned_requests(job.harness),
            load_cpu_s=cfg.load_cpu_s + HARNESS_LOAD_CPU_S, test_cpu_s=job.cpu_s,
            max_output_bytes=CHECK_VALUE_BYTES,
        )  # fmt: skip
    except ValueError as e:
        raise ValueError(f"CheckJob {job.id!r}: {str(e).replace('test_cpu_s', 'cpu_s')}") from e


def check_verdict(outcome: ProgramOutcome) -> Verdict:
    """pass / fail (the check raised; reason = exception type) / timeout / memory / error."""
    if outcome.load_status != "pass":
        if outcome.load_status in ("timeout", "memory"):
            return Verdict(outcome.load_status, f"during load: {outcome.load_reason}")
        return Verdict("error", outcome.load_reason)
    got = outcome.exprs[0]
    if got.kind == "value":
        return Verdict("pass")
    if got.kind == "raise":
        return Verdict("fail", got.reason)
    if got.kind in ("timeout", "memory"):
        return Verdict(got.kind, got.reason)
    return Verdict("error", got.reason)
