"""CheckJob → Verdict: run an evalplus-style harness's ``check(candidate)`` against one program.

The candidate's definitions and the harness are executed in two separate namespaces of the same
program process (neither can shadow the other's names); ``check`` is then called, in a fresh fork,
with the candidate's entry point, under the job's CPU budget.
"""

from __future__ import annotations

from codea1.config import SandboxConfig
from codea1.sandbox.tasks import ProgramOutcome, ProgramTask
from codea1.types import CheckJob, Verdict

HARNESS_LOAD_CPU_S = 10.0
"""Extra CPU budget for loading a harness (evalplus harnesses hold large literal input lists)."""


def check_task(job: CheckJob, cfg: SandboxConfig) -> ProgramTask:
    """The program task that runs ``job``'s harness once; ValueError when its budget is unusable."""
    try:
        return ProgramTask.make(
            job.code, job.entry_point, ("check",), cfg, harness=job.harness,
            load_cpu_s=cfg.load_cpu_s + HARNESS_LOAD_CPU_S, test_cpu_s=job.cpu_s,
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
