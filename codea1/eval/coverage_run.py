"""Line and branch coverage of a reference solution under a list of test calls (coverage.py).

The reference is written to a module file in a temporary directory; a driver imports it under
``coverage`` (branch mode) and evaluates each call expression in the module's namespace, ignoring
exceptions, each call under a CPU-time alarm. Everything runs in a separate interpreter (``-I``)
with a scrubbed environment, the temporary directory as working directory, CPU, memory and
file-size rlimits and a wall-clock timeout.

Not a sandbox: the calls are untrusted model text. Callers pass only calls that already ran on the
reference inside the sandbox (the valid tests), which bounds but does not remove the risk.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

MODULE_NAME = "solution_under_test"

_DRIVER = r"""
import json, signal, sys
sys.path.insert(0, sys.argv[1])
import coverage
job = json.load(open("job.json"))
def _alarm(signum, frame):
    raise TimeoutError("call budget exceeded")
signal.signal(signal.SIGALRM, _alarm)
cov = coverage.Coverage(branch=True, data_file=None, include=[job["module_path"]])
cov.start()
try:
    import solution_under_test as _m
    ns = vars(_m)
    for call in job["calls"]:
        signal.setitimer(signal.ITIMER_PROF, job["call_cpu_s"])
        try:
            eval(compile(call, "<test>", "eval"), ns)
        except BaseException:
            pass
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
finally:
    cov.stop()
cov.json_report(outfile="coverage.json", include=[job["module_path"]])
summary = next(iter(json.load(open("coverage.json"))["files"].values()))["summary"]
print("__CODEA1_COVERAGE__" + json.dumps({
    "statements": summary["num_statements"], "covered_statements": summary["covered_lines"],
    "branches": summary.get("num_branches", 0), "covered_branches": summary.get("covered_branches", 0),
}))
"""


@dataclass(frozen=True)
class Coverage:
    """Coverage of the reference: line and branch percentages, or an error."""

    line: float
    branch: float
    statements: int = 0
    branches: int = 0
    error: str = ""


def _limits(cpu_s: float, memory_mb: int) -> Callable[[], None]:
    def apply() -> None:
        cap = int(cpu_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cap, cap + 1))
        mem = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024 * 1024, 16 * 1024 * 1024))
        os.setsid()

    return apply


def reference_coverage(
    reference: str,
    calls: Sequence[str],
    *,
    call_cpu_s: float = 2.0,
    timeout_s: float = 60.0,
    memory_mb: int = 2048,
) -> Coverage:
    """Line and branch coverage (percent) of ``reference`` when ``calls`` are evaluated against it.

    A reference without branches has 100 % branch coverage once any line runs. Failures of the
    measuring process are returned as ``Coverage(0, 0, error=...)``, never raised.
    """
    with tempfile.TemporaryDirectory(prefix="codea1-cov-") as tmp:
        module_path = Path(tmp) / f"{MODULE_NAME}.py"
        module_path.write_text(reference, encoding="utf-8")
        job = {"module_path": str(module_path), "calls": list(calls), "call_cpu_s": call_cpu_s}
        (Path(tmp) / "job.json").write_text(json.dumps(job), encoding="utf-8")
        env = {"PATH": os.defpath, "HOME": tmp, "TMPDIR": tmp, "OMP_NUM_THREADS": "1"}
        try:
            proc = subprocess.run(
                [sys.executable, "-I", "-c", _DRIVER, tmp],
                capture_output=True,
                text=True,
                cwd=tmp,
                env=env,
                timeout=timeout_s,
                preexec_fn=_limits(timeout_s, memory_mb),
            )
        except subprocess.TimeoutExpired:
            return Coverage(0.0, 0.0, error=f"timeout after {timeout_s:.0f} s")
    marker = proc.stdout.rfind("__CODEA1_COVERAGE__")
    if marker < 0:
        return Coverage(0.0, 0.0, error=f"exit code {proc.returncode}: {proc.stderr[-300:]}")
    nums = json.loads(proc.stdout[marker + len("__CODEA1_COVERAGE__") :].splitlines()[0])
    line = 100.0 * nums["covered_statements"] / nums["statements"] if nums["statements"] else 100.0
    if nums["branches"]:
        branch = 100.0 * nums["covered_branches"] / nums["branches"]
    else:
        branch = 100.0 if nums["covered_statements"] else 0.0
    return Coverage(line, branch, nums["statements"], nums["branches"])
