"""CPU cost of harness checks (``Sandbox.run_checks``), this checkout against a baseline checkout.

Jobs: the canonical solution and one AST mutant of the first ``--limit`` HumanEval+ and MBPP+
problems, each checked against its evalplus harness (errata applied), exactly as ``codea1 eval
code`` builds them. Both sides run the same jobs in separate processes, one after the other; each
runs them ``--repeats`` times on a warm pool and reports the median CPU-ms per check (workers and
everything they reaped, ``Sandbox.worker_cpu_s``), the wall time and the verdict counts.

    git worktree add ../codea1-base <revision>
    python benchmarks/check_bench.py --baseline ../codea1-base --limit 40
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_jobs(limit: int) -> list:
    """Canonical + one mutant per problem, as CheckJobs (harness program as this checkout builds it)."""
    from codea1.data.problems import load_problems
    from codea1.eval import code_eval
    from codea1.eval.errata import apply_errata
    from codea1.eval.mutants import generate_mutants
    from codea1.types import CheckJob

    problems = []
    for name in ("humanevalplus", "mbppplus"):
        problems += load_problems(name)[:limit]
    problems, _ = apply_errata(problems)
    make_harness = getattr(code_eval, "harness_program", lambda p, h: h)
    jobs = []
    for p in problems:
        codes = [p.reference] + [m.source for m in generate_mutants(p.reference, limit=1)]
        for i, code in enumerate(codes):
            program = code_eval.candidate_program(p, code)
            jobs.append(CheckJob(f"{p.id}#{i}", program, p.entry_point, make_harness(p, p.harness), 10.0))
    return jobs


def measure(limit: int, repeats: int, workers: int) -> dict:
    """Run the jobs ``repeats`` times on one warm pool; CPU-ms per check (median) and verdicts."""
    from codea1.config import SandboxConfig
    from codea1.sandbox import Sandbox

    jobs = build_jobs(limit)
    cpu, wall = [], []
    with Sandbox(SandboxConfig(workers=workers, memory_mb=4096)) as sandbox:
        sandbox.run_checks(jobs[:4])  # warm-up
        for _ in range(repeats):
            c0, t0 = sandbox.worker_cpu_s(), time.perf_counter()
            verdicts = sandbox.run_checks(jobs)
            wall.append(time.perf_counter() - t0)
            cpu.append(sandbox.worker_cpu_s() - c0)
    return {
        "checks": len(jobs),
        "cpu_ms_per_check": 1000 * statistics.median(cpu) / len(jobs),
        "wall_s": statistics.median(wall),
        "verdicts": dict(Counter(v.status for v in verdicts)),
    }


def _run_side(src: Path, args: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    shared = ROOT.parent / "shared" / "data" / "evalplus_humaneval_mbpp_plus.parquet"
    if shared.is_file():  # the baseline checkout may live where ../shared is not
        env.setdefault("CODEA1_EVALPLUS_PARQUET", str(shared))
    cmd = [sys.executable, __file__, "--measure", "--limit", str(args.limit), "--repeats", str(args.repeats),
           "--workers", str(args.workers)]  # fmt: skip
    out = subprocess.run(cmd, env=env, cwd=src, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, help="a checkout of the revision to compare against")
    ap.add_argument("--limit", type=int, default=40, help="problems per benchmark")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.limit, args.repeats, args.workers)))
        return
    sides = [("this checkout", ROOT)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    rows = [(name, _run_side(src, args)) for name, src in sides]
    print(f"{'side':14s} {'checks':>6s} {'CPU-ms/check':>12s} {'wall s':>7s}  verdicts")
    for name, r in rows:
        print(
            f"{name:14s} {r['checks']:6d} {r['cpu_ms_per_check']:12.2f} {r['wall_s']:7.1f}  {r['verdicts']}"
        )
    if len(rows) == 2:
        print(
            f"ratio this/baseline CPU per check: {rows[0][1]['cpu_ms_per_check'] / rows[1][1]['cpu_ms_per_check']:.3f}"
        )


if __name__ == "__main__":
    main()
