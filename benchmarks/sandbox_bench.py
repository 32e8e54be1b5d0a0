"""Sandbox throughput and verdict agreement on HumanEval+/MBPP+ reference solutions and AST mutants.

Designs, run side by side in one process tree:
  (a) a fresh interpreter per (code, test) pair (how SandboxFusion is used by verl): the reference;
  (b) one process per program running all its tests (evalplus-style; unsafe, shares state);
  (c) codea1's Sandbox (zygote pool, fork per program, fork per test, every available layer).

Tests are calls ``entry_point(*inputs)`` taken from the harness ``inputs`` lists; the expected
value of every test is the reference solution's return value. Printed per design: CPU-ms per pair
(getrusage of self + reaped children; for (c) also the live workers, ``Sandbox.worker_cpu_s``),
pairs/s, p50/p99 latency, and verdict agreement with (a). For (c) the oracle phase, the candidate
phase and the worker start are measured separately (each phase run ``--repeats`` times, medians
reported); the latency pass is in none of them.

    python benchmarks/sandbox_bench.py --limit 20 --tests 6 --mutants 2
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from codea1.config import SandboxConfig
from codea1.sandbox import Sandbox, grid
from codea1.sandbox.equality import values_equal
from codea1.sandbox.tasks import ProgramOutcome, ProgramTask
from codea1.types import GridJob, TestCase

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "evalplus_humaneval_mbpp_plus.parquet"


def cpu_s() -> float:
    """CPU seconds of this process plus its reaped children."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


class _Mutate(ast.NodeTransformer):
    """Apply the ``k``-th applicable mutation (flip a comparison, swap + and -, bump an int)."""

    def __init__(self, k: int) -> None:
        self.k, self.seen, self.done = k, 0, False

    def _hit(self) -> bool:
        self.seen += 1
        if self.seen - 1 == self.k and not self.done:
            self.done = True
            return True
        return False

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        flips = {
            ast.Lt: ast.GtE,
            ast.Gt: ast.LtE,
            ast.LtE: ast.Gt,
            ast.GtE: ast.Lt,
            ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq,
        }
        if type(node.ops[0]) in flips and self._hit():
            node.ops[0] = flips[type(node.ops[0])]()
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        swaps = {ast.Add: ast.Sub, ast.Sub: ast.Add}
        if type(node.op) in swaps and self._hit():
            node.op = swaps[type(node.op)]()
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if type(node.value) is int and self._hit():
            return ast.Constant(node.value + 1)
        return node


def mutants(source: str, n: int, seed: int) -> list[str]:
    """Up to ``n`` distinct single-point AST mutants of ``source``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    counter = _Mutate(10**9)
    counter.visit(tree)
    sites = list(range(counter.seen))
    random.Random(seed).shuffle(sites)
    out: list[str] = []
    for k in sites:
        m = _Mutate(k)
        text = ast.unparse(m.visit(ast.parse(source)))
        if m.done and text not in out and text != ast.unparse(ast.parse(source)):
            out.append(text)
        if len(out) == n:
            break
    return out


def harness_inputs(harness: str) -> list[list[object]] | None:
    """The literal ``inputs`` list assigned inside ``check`` (None when it is not a plain literal)."""
    for node in ast.walk(ast.parse(harness)):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "inputs" for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError):
                return None
            return value if isinstance(value, list) else None
    return None


def load_problems(limit: int, n_tests: int, n_mutants: int) -> list[dict[str, object]]:
    """Half HumanEval+, half MBPP+: reference, mutants, calls."""
    import pyarrow.parquet as pq

    rows = pq.read_table(DATA).to_pylist()
    by_source: dict[str, list[dict[str, object]]] = {}
    for r in rows:
        by_source.setdefault(str(r["data_source"]), []).append(r)
    picked = []
    for group in by_source.values():
        for r in group:
            if len([p for p in picked if p["source"] == r["data_source"]]) >= (limit + 1) // 2:
                break
            info = r["extra_info"]
            body = str(r["GT_code"])
            code = (
                body
                if body.lstrip().startswith(("def ", "import", "from", "class"))
                else info["function_declaration"] + "\n" + body
            )
            code = info["imports"] + "\n" + code
            inputs = harness_inputs(str(r["test"]))
            if not inputs:
                continue
            calls = [
                f"{info['function_name']}(*{inp!r})" for inp in inputs[:n_tests] if len(repr(inp)) < 2000
            ]
            picked.append({"source": r["data_source"], "id": info["question_id"], "entry": info["function_name"],
                           "reference": code, "codes": [code, *mutants(code, n_mutants, len(picked))], "calls": calls})  # fmt: skip
    return picked[:limit]


def _parse(text: str) -> tuple[str, object]:
    kind, _, rest = text.partition(" ")
    if kind != "OK":
        return kind or "error", None
    try:
        return "value", ast.literal_eval(rest)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return "value", ("<repr>", rest)


_RUNNER = (
    "import sys\nsrc, calls = sys.stdin.read().split('\\x00', 1)\nns = {'__name__': 'prog'}\nexec(src, ns)\n"
    "for call in calls.split('\\x00'):\n    try:\n        print('OK', repr(eval(call, ns)), flush=True)\n"
    "    except BaseException as e:\n        print('ERR', type(e).__name__, flush=True)\n"
)


def run_fresh(code: str, calls: list[str], timeout: float) -> tuple[list[tuple[str, object]], float]:
    """One interpreter running ``calls`` in order; returns per-call (kind, value) and the latency."""
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", _RUNNER], input=code + "\x00" + "\x00".join(calls),
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip
        lines = proc.stdout.splitlines()
    except subprocess.TimeoutExpired:
        lines = []
    out = [_parse(lines[i]) if i < len(lines) else ("timeout", None) for i in range(len(calls))]
    return out, time.monotonic() - start


def verdict(got: tuple[str, object], want: tuple[str, object]) -> str:
    """pass / fail / error / timeout, comparing with the reference's value (codea1 equality)."""
    if want[0] != "value":
        return "invalid"
    if got[0] != "value":
        return "timeout" if got[0] == "timeout" else "error"
    return "pass" if values_equal(got[1], want[1]) else "fail"


def _stats(name: str, pairs: int, cpu: float, wall: float, lat: list[float], agree: str) -> str:
    lat_ms = sorted(x * 1000 for x in lat) or [0.0]
    p99 = lat_ms[min(len(lat_ms) - 1, int(0.99 * len(lat_ms)))]
    return (f"{name:34} {pairs:7d} {cpu * 1000 / pairs:9.2f} {pairs / wall:9.1f} "
            f"{statistics.median(lat_ms):8.1f} {p99:8.1f}  {agree}")  # fmt: skip


_FORK_FLOOR = (
    "import os, resource\n"
    "def cpu():\n    a, b = resource.getrusage(0), resource.getrusage(-1)\n"
    "    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime\n"
    "c = cpu()\nfor _ in range({n}):\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n"
    "    os.waitpid(pid, 0)\nprint((cpu() - c) * 1000 / {n})\n"
)


def fork_floor(n: int = 300) -> float:
    """CPU-ms of fork + exit + wait from a lean interpreter (the machine's per-test floor)."""
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _FORK_FLOOR.format(n=n)], capture_output=True, text=True
    )
    return float(out.stdout.strip() or "nan")


def main() -> None:
    """Run the three designs and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=20, help="problems (half HumanEval+, half MBPP+)")
    ap.add_argument("--tests", type=int, default=6, help="tests per problem")
    ap.add_argument("--mutants", type=int, default=2, help="AST mutants per reference")
    ap.add_argument("--workers", type=int, default=0, help="parallelism for every design (0 = cores)")
    ap.add_argument("--timeout", type=float, default=3.0, help="per-test CPU budget (wall for a/b)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of (c)'s two phases (medians reported)")
    args = ap.parse_args()
    if not DATA.exists():
        sys.exit(f"data not found: {DATA}")
    workers = args.workers or os.cpu_count() or 1
    problems = load_problems(args.limit, args.tests, args.mutants)
    pairs = [(p, c, call) for p in problems for c in p["codes"] for call in p["calls"]]  # type: ignore[attr-defined]
    print(
        f"{len(problems)} problems, {sum(len(p['codes']) for p in problems)} programs, {len(pairs)} pairs, workers={workers}"
    )
    print(f"fork floor (fork+exit+wait): {fork_floor():.2f} CPU-ms")

    # (a) fresh interpreter per pair (references first: they define the expected values)
    c0, t0 = cpu_s(), time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        refs = list(pool.map(lambda pc: run_fresh(pc[0]["reference"], [pc[1]], args.timeout * 3)[0][0],
                             [(p, call) for p in problems for call in p["calls"]]))  # fmt: skip
        want = {}
        i = 0
        for p in problems:
            for call in p["calls"]:  # type: ignore[attr-defined]
                want[(p["id"], call)] = refs[i]
                i += 1
        res_a = list(pool.map(lambda t: run_fresh(t[1], [t[2]], args.timeout * 3), pairs))
    cpu_a, wall_a = cpu_s() - c0, time.monotonic() - t0
    v_a = [verdict(r[0][0], want[(p["id"], call)]) for (p, _, call), r in zip(pairs, res_a, strict=True)]

    # (b) one process per program, all its tests in it
    c0, t0 = cpu_s(), time.monotonic()
    progs = [(p, c) for p in problems for c in p["codes"]]  # type: ignore[attr-defined]
    with ThreadPoolExecutor(workers) as pool:
        res_b = list(
            pool.map(
                lambda pc: run_fresh(pc[1], pc[0]["calls"], args.timeout * len(pc[0]["calls"]) + 5), progs
            )
        )
    cpu_b, wall_b = cpu_s() - c0, time.monotonic() - t0
    v_b = [verdict(got, want[(p["id"], call)]) for (p, _), (outs, _) in zip(progs, res_b, strict=True)
           for call, got in zip(p["calls"], outs, strict=True)]  # fmt: skip

    # (c) codea1 Sandbox: the two phases of run_grids, each measured on its own (parent + workers)
    jobs = [GridJob(str(p["id"]), str(p["reference"]), str(p["entry"]), tuple(p["codes"]),
                    tuple(TestCase(c, c) for c in p["calls"])) for p in problems]  # fmt: skip
    cfg = SandboxConfig(workers=workers, test_cpu_s=args.timeout, load_cpu_s=args.timeout)
    c0, t0 = cpu_s(), time.monotonic()
    sandbox = Sandbox(cfg)
    c_start = cpu_s() - c0 + sandbox.worker_cpu_s()
    layers = sandbox.layers()

    def phase(tasks: list[ProgramTask]) -> tuple[list[ProgramOutcome], float, float]:
        c, w, t = cpu_s(), sandbox.worker_cpu_s(), time.monotonic()
        outs = sandbox.run_tasks(tasks)
        return outs, cpu_s() - c + sandbox.worker_cpu_s() - w, time.monotonic() - t

    o_plan = grid.plan_oracle(jobs, cfg)
    runs = []  # each phase is repeated; the median CPU of each is reported (the machine is noisy)
    for _ in range(args.repeats):
        o_outs, cpu_o, wall_o = phase(o_plan.tasks)
        oracle = grid.oracle_verdicts(jobs, o_plan, o_outs, 1e-6, 1e-6)
        c_plan = grid.plan_codes(jobs, oracle, cfg)
        c_outs, cpu_cand, wall_cand = phase(c_plan.tasks)
        runs.append(
            (cpu_o, wall_o, cpu_cand, wall_cand, grid.assemble(jobs, oracle, c_plan, c_outs, 1e-6, 1e-6))
        )
    grids = runs[0][4]
    deterministic = all(r[4] == grids for r in runs)
    cpu_o, wall_o, cpu_cand, wall_cand = (statistics.median(r[k] for r in runs) for k in range(4))
    lat_c: list[float] = []
    for job in jobs[: min(10, len(jobs))]:  # latency of a single-problem call (not in the CPU numbers)
        s = time.monotonic()
        sandbox.run_grids([job])
        lat_c.append(time.monotonic() - s)
    sandbox.close()
    wall_total = time.monotonic() - t0
    v_c = [v.status for g in grids for row in g.verdicts for v in row]
    o_exprs = sum(len(t.exprs) for t in o_plan.tasks)

    def agree(v: list[str]) -> str:
        same = sum(
            x == y or (x not in ("pass",) and y not in ("pass",) and "invalid" not in (x, y))
            for x, y in zip(v, v_a, strict=True)
        )
        exact = sum(x == y for x, y in zip(v, v_a, strict=True))
        return f"{same}/{len(v_a)} pass/not-pass, {exact}/{len(v_a)} exact"

    print(f"layers: {', '.join(k for k, s in layers.items() if s == 'active')} active"
          + "".join(f"; {k} {s}" for k, s in layers.items() if s != "active"))  # fmt: skip
    counts = {s: v_a.count(s) for s in sorted(set(v_a))}
    print(f"reference verdicts (a): {counts}")
    print(
        f"{'design':34} {'pairs':>7} {'CPU-ms/p':>9} {'pairs/s':>9} {'p50 ms':>8} {'p99 ms':>8}  agreement with (a)"
    )
    print(
        _stats(
            "(a) fresh interpreter per pair", len(pairs), cpu_a, wall_a, [r[1] for r in res_a], "reference"
        )
    )
    print(
        _stats("(b) one process per program", len(pairs), cpu_b, wall_b, [r[1] for r in res_b], agree(v_b))
        + "  [latency per program]"
    )
    n = len(pairs)
    batch = cpu_o + cpu_cand
    print(_stats("(c) codea1 sandbox, candidates", n, cpu_cand, wall_cand, lat_c, agree(v_c))
          + "  [latency per problem]")  # fmt: skip
    print(f"(c) medians of {args.repeats} runs of each phase; identical grids in every run: {deterministic}")
    print(f"(c) oracle phase: {len(o_plan.tasks)} references x {o_exprs} expressions, {cpu_o * 1000:.0f} CPU-ms "
          f"= {cpu_o * 1000 / max(o_exprs, 1):.2f} CPU-ms per expression")  # fmt: skip
    print(f"(c) CPU-ms per pair: candidates {cpu_cand * 1000 / n:.2f}; batch (oracle + candidates, excl. worker "
          f"start) {batch * 1000 / n:.2f}; incl. worker start ({c_start * 1000:.0f} ms) {(batch + c_start) * 1000 / n:.2f}")  # fmt: skip
    print(f"(c) batch {n / (wall_o + wall_cand):.1f} pairs/s; wall incl. worker start and latency pass "
          f"{wall_total:.1f}s; CPU ratio a/c (batch) = {cpu_a / batch:.1f}x, candidates only = {cpu_a / cpu_cand:.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
