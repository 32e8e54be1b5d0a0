"""What every sandbox offers on top of running program tasks: execution grids and harness checks.

A :class:`TaskExecutor` runs :class:`~codea1.sandbox.tasks.ProgramTask` lists (``run_tasks``); the
planning of a grid's tasks and the judging of their outcomes (:mod:`codea1.sandbox.grid`,
:mod:`codea1.sandbox.checks`) happen here, in the calling process, whatever runs the tasks: the
local process pool (:class:`~codea1.sandbox.local.Sandbox`) or the node actors of a Ray cluster
(:class:`~codea1.sandbox.cluster.ClusterSandbox`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TypeVar

from codea1.config import SandboxConfig
from codea1.sandbox import checks, grid
from codea1.sandbox.tasks import ProgramOutcome, ProgramTask
from codea1.types import CheckJob, ExecGrid, GridJob, Verdict

_E = TypeVar("_E", bound="TaskExecutor")


class SandboxUnavailable(RuntimeError):
    """The sandbox could not start, or (strict mode) a required isolation layer is missing."""


class WorkerFailure(RuntimeError):
    """A worker died, broke the protocol, or missed its deadline."""


class TaskExecutor(ABC):
    """Runs program tasks; plans and judges grids and checks from their outcomes (trusted side)."""

    config: SandboxConfig
    """Budgets of the tasks this executor plans."""

    @abstractmethod
    def run_tasks(self, tasks: Sequence[ProgramTask]) -> list[ProgramOutcome]:
        """Run program tasks; one outcome per task, in task order."""

    @abstractmethod
    def layers(self) -> dict[str, str]:
        """Isolation layer name → ``"active"`` or ``"unavailable: <why>"``."""

    @abstractmethod
    def close(self) -> None:
        """Stop every worker and release what the executor holds (idempotent)."""

    def run_grids(
        self, jobs: Sequence[GridJob], *, rel_tol: float = 1e-6, abs_tol: float = 1e-6
    ) -> list[ExecGrid]:
        """Oracle + codes × tests verdicts for every job (identical computations run once)."""
        oracle_plan = grid.plan_oracle(jobs, self.config)
        oracle = grid.oracle_verdicts(jobs, oracle_plan, self.run_tasks(oracle_plan.tasks), rel_tol, abs_tol)
        code_plan = grid.plan_codes(jobs, oracle, self.config)
        outcomes = self.run_tasks(code_plan.tasks)
        return grid.assemble(jobs, oracle, code_plan, outcomes, rel_tol, abs_tol)

    def run_checks(self, jobs: Sequence[CheckJob]) -> list[Verdict]:
        """Run evalplus-style harnesses; one verdict per job."""
        tasks = [checks.check_task(job, self.config) for job in jobs]
        return [checks.check_verdict(o) for o in self.run_tasks(tasks)]

    def __enter__(self: _E) -> _E:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
