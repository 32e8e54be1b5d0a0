"""An in-process stand-in for the sandbox's ``run_grids`` (trusted test inputs only; never for model code).

It evaluates each call against the reference and against each code in separate namespaces and
applies the same verdict rules as the sandbox: a usable oracle per test, ``pass`` only when the
candidate's value equals the oracle value (floats within tolerance), ``invalid`` for unusable tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from codea1.types import ExecGrid, GridJob, OracleVerdict, Verdict


def _equal(a: Any, b: Any, rel_tol: float, abs_tol: float) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y, rel_tol, abs_tol) for x, y in zip(a, b, strict=True))
    return a == b


class FakeSandbox:
    """Records the jobs it receives; ``fail_ids`` makes ``run_grids`` raise whenever they are present."""

    def __init__(self, fail_ids: Sequence[str] = ()) -> None:
        self.calls: list[list[GridJob]] = []
        self.fail_ids = set(fail_ids)

    def run_grids(self, jobs: Sequence[GridJob], *, rel_tol: float, abs_tol: float) -> list[ExecGrid]:
        self.calls.append(list(jobs))
        if any(j.id in self.fail_ids for j in jobs):
            raise RuntimeError("worker crashed")
        return [self._grid(j, rel_tol, abs_tol) for j in jobs]

    def _grid(self, job: GridJob, rel_tol: float, abs_tol: float) -> ExecGrid:
        ref: dict[str, Any] = {}
        exec(job.reference, ref)  # noqa: S102 - fixtures only
        oracle, values = [], []
        for t in job.tests:
            try:
                value = eval(t.call, dict(ref))  # noqa: S307
            except Exception as e:  # noqa: BLE001
                oracle.append(OracleVerdict("invalid", type(e).__name__))
                values.append(None)
                continue
            try:
                predicted = eval(t.predicted, {})  # noqa: S307
                ok = _equal(value, predicted, rel_tol, abs_tol)
            except Exception:  # noqa: BLE001
                ok = False
            oracle.append(OracleVerdict("valid" if ok else "wrong_prediction"))
            values.append(value)
        status, rows = [], []
        for code in job.codes:
            ns: dict[str, Any] = {}
            try:
                exec(code, ns)  # noqa: S102
                loaded = callable(ns.get(job.entry_point))
            except Exception:  # noqa: BLE001
                loaded = False
            status.append(Verdict("pass" if loaded else "error"))
            row = []
            for t, o, v in zip(job.tests, oracle, values, strict=True):
                if not loaded or not o.usable:
                    row.append(Verdict("invalid"))
                    continue
                try:
                    got = eval(t.call, dict(ns))  # noqa: S307
                except Exception as e:  # noqa: BLE001
                    row.append(Verdict("error", type(e).__name__))
                    continue
                row.append(Verdict("pass" if _equal(got, v, rel_tol, abs_tol) else "fail"))
            rows.append(tuple(row))
        return ExecGrid(job.id, tuple(oracle), tuple(status), tuple(rows))
