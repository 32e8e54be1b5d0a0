"""Per-problem time budgets derived from the reference solution's measured CPU time (as evalplus does).

Each reference is run once against its own (errata-patched) harness in a separate interpreter, with
the reference and the harness in separate namespaces (the harness program as the sandbox runs it:
the question's helpers first, the entry point's name bound to the reference), and the CPU time of
defining both and calling ``check`` is recorded. The measurements double as the validation of every
reference against its harness (``ok`` / ``error``) and of the harness itself: sentinel candidates
that are wrong by construction (one returns a fresh ``object()``, one a constant string, one
raises) are run through it too, and a harness that passes one of them cannot fail and is reported
(``vacuous``). They are cached in a JSON file keyed by the dataset hash, the errata table and
:data:`TIMINGS_VERSION`, so a benchmark is measured once per machine.
``budget = max(floor, factor x reference time)``.

The measuring process runs trusted code only (dataset references and harnesses), with a scrubbed
environment, a temporary working directory and a CPU-time rlimit; it is not a sandbox.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from codea1.eval.code_eval import harness_program
from codea1.results_file import read_json, write_json_atomic
from codea1.types import Problem

DEFAULT_FLOOR_S = 4.0
"""Smallest CPU budget of one whole harness check (seconds)."""
DEFAULT_FACTOR = 4.0
"""Budget multiple of the reference's CPU time (evalplus uses 4x the ground truth's time)."""
TIMINGS_VERSION = 2
"""Bumped when what a cached measurement holds changes (2: sentinel candidates)."""
NO_HARNESS = "no harness"
"""The error of a problem without a harness: nothing to time it against (its budget is the floor)."""
MEASURE_TIMEOUT_S = 600.0
"""Wall-clock limit for measuring one reference; slower references are recorded as failing."""

_DRIVER = r"""
import json, sys, time
job = json.loads(sys.stdin.read())
entry = job["entry_point"]

def run(candidate):
    harn = {"__name__": "__harness__", entry: candidate}
    exec(compile(job["harness"], "<harness>", "exec"), harn)
    harn["check"](candidate)

def raises(*args, **kwargs):
    raise RuntimeError("codea1 sentinel")

t0 = time.process_time()
try:
    cand = {"__name__": "__candidate__"}
    exec(compile(job["reference"], "<reference>", "exec"), cand)
    run(cand[entry])
    ok, error = True, ""
except BaseException as e:
    ok, error = False, (type(e).__name__ + ": " + str(e))[:300]
cpu_s = time.process_time() - t0
vacuous = []
sentinels = (("returns object()", lambda *a, **k: object()), ("returns a constant string", lambda *a, **k: "\x00codea1 sentinel"), ("raises", raises))
for name, fn in sentinels:
    try:
        run(fn)
        vacuous.append(name)
    except BaseException:
        pass
out = {"cpu_s": cpu_s, "ok": ok, "error": error, "vacuous": ", ".join(vacuous)}
sys.stdout.write("\n__CODEA1_TIMING__" + json.dumps(out) + "\n")
"""


@dataclass(frozen=True)
class ReferenceTiming:
    """One reference checked against its harness: CPU seconds, and whether the check passed."""

    cpu_s: float
    ok: bool
    error: str = ""
    vacuous: str = ""
    """The sentinel candidates (wrong by construction) that passed the harness; empty if none."""


def check_budget(ref_cpu_s: float, floor_s: float = DEFAULT_FLOOR_S, factor: float = DEFAULT_FACTOR) -> float:
    """The CPU budget of one candidate's harness check: ``max(floor_s, factor * ref_cpu_s)``."""
    return max(floor_s, factor * ref_cpu_s)


def _limit_cpu(seconds: float) -> Callable[[], None]:
    def apply() -> None:
        cap = int(seconds) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cap, cap + 1))
        os.setsid()

    return apply


def measure_reference(problem: Problem, timeout_s: float = MEASURE_TIMEOUT_S) -> ReferenceTiming:
    """Run ``problem.reference`` against ``problem.harness`` once and time it (CPU seconds)."""
    if not problem.harness:
        return ReferenceTiming(0.0, False, NO_HARNESS)
    harness = harness_program(problem, problem.harness)
    job = {"reference": problem.reference, "harness": harness, "entry_point": problem.entry_point}
    with tempfile.TemporaryDirectory(prefix="codea1-reftime-") as tmp:
        env = {"PATH": os.defpath, "HOME": tmp, "TMPDIR": tmp, "OMP_NUM_THREADS": "1"}
        try:
            proc = subprocess.run(
                [sys.executable, "-I", "-c", _DRIVER],
                input=json.dumps(job),
                capture_output=True,
                text=True,
                cwd=tmp,
                env=env,
                timeout=timeout_s,
                preexec_fn=_limit_cpu(timeout_s),
            )
        except subprocess.TimeoutExpired:
            return ReferenceTiming(timeout_s, False, f"timeout after {timeout_s:.0f} s wall")
    marker = proc.stdout.rfind("__CODEA1_TIMING__")
    if marker < 0:
        tail = (proc.stderr or proc.stdout)[-300:]
        return ReferenceTiming(0.0, False, f"exit code {proc.returncode}: {tail}")
    out = json.loads(proc.stdout[marker + len("__CODEA1_TIMING__") :].strip())
    return ReferenceTiming(float(out["cpu_s"]), bool(out["ok"]), str(out["error"]), str(out["vacuous"]))


def reference_timings(
    problems: Sequence[Problem],
    cache_file: Path | None,
    *,
    workers: int = 0,
    timeout_s: float = MEASURE_TIMEOUT_S,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, ReferenceTiming]:
    """Timings for every problem, read from ``cache_file`` where present and measured otherwise.

    New measurements are written back to ``cache_file`` (atomically) after each one finishes, so an
    interrupted measurement resumes. ``workers`` = 0 uses one process per CPU core.
    """
    cached = read_json(cache_file) if cache_file is not None and cache_file.exists() else {}
    timings = {pid: ReferenceTiming(**t) for pid, t in cached.get("timings", {}).items()}
    todo = [p for p in problems if p.id not in timings]
    if todo:
        n_workers = workers or os.cpu_count() or 1
        with ThreadPoolExecutor(max_workers=n_workers) as pool:
            futures = {pool.submit(measure_reference, p, timeout_s): p.id for p in todo}
            for done, fut in enumerate(as_completed(futures), 1):
                timings[futures[fut]] = fut.result()
                if cache_file is not None:
                    payload = {pid: vars(t) for pid, t in sorted(timings.items())}
                    write_json_atomic(cache_file, {"timings": payload})
                if progress is not None:
                    progress(done, len(todo))
    return {p.id: timings[p.id] for p in problems}


def reference_failures(timings: dict[str, ReferenceTiming]) -> dict[str, str]:
    """Problem id → error, for every reference that failed its own harness."""
    return {pid: t.error for pid, t in timings.items() if not t.ok}


def vacuous_harnesses(timings: dict[str, ReferenceTiming]) -> dict[str, str]:
    """Problem id → the sentinels that passed, for every harness that cannot fail."""
    return {pid: t.vacuous for pid, t in timings.items() if t.vacuous}
