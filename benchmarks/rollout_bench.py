"""Rollout throughput of the transformers and vLLM engines, side by side in one run.

1. For each dtype (fp32, bf16) and each engine, the same coder prompts of a preset's training data
   are sampled with the same settings through the engine's ``Policy`` (the path training uses), and
   completion tokens/s are printed with the speed-up over transformers. Each measurement runs in a
   child process of its own (a fresh engine, nothing shared), after one short warm-up call.
2. With ``--steps N``, ``codea1 train`` runs N steps of the preset with each rollout engine and the
   mean step time, its rollout and update phases and the tokens trained on are printed side by
   side. The engines sample different completions, so in ``a1`` the tester's work (and both
   updates) can differ between them; ``--set train.method=golden`` gives both the same kind of work.
3. With ``--seeds``, vLLM samples the same prompts with one seed per request (what codea1 does:
   every completion reproducible on its own, whatever the batch) and unseeded (one engine-wide
   generator, which lets vLLM's sampler take its batched top-k/top-p path), each in a fresh process,
   side by side in wall and CPU seconds: what per-request reproducibility costs.

Usage: ``python benchmarks/rollout_bench.py [--preset tiny-cpu] [--prompts 16] [--n 4]
[--max-new-tokens 256] [--dtypes float32,bfloat16] [--steps 1] [--seeds] [--top-p 1.0]``. Needs the demo model and, for
the vLLM rows, a working vLLM (``codea1 doctor``). Slow (minutes); run it alone: the numbers are
meaningless under CPU contention.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENGINES = ("transformers", "vllm")


def measure(
    preset: str, engine: str, dtype: str, prompts: int, n: int, max_new_tokens: int,
    *, seeded: bool = True, top_p: float = 1.0,
) -> dict:  # fmt: skip
    """Tokens, seconds and CPU seconds of one sampling call (in this process), seeded per request
    or not; see :func:`child`."""
    from codea1.config import load_config
    from codea1.data.problems import load_problems
    from codea1.data.prompts import coder_messages
    from codea1.engine.base import SamplingParams
    from codea1.engine.build import build

    overrides = [
        f"engine.rollout={engine}", f"engine.dtype={dtype}", "engine.device=cpu", "train.method=golden",
        "tester.view=whitebox", "loss.kl_coef=0", f"coder.sampling.max_new_tokens={max_new_tokens}",
        f"coder.sampling.batch_size={prompts * n}", f"tester.sampling.batch_size={prompts * n}",
    ]  # fmt: skip
    cfg = load_config(preset, overrides)
    start = time.perf_counter()
    roles = build(cfg)
    load = time.perf_counter() - start
    policy = roles.coder_policy
    problems = load_problems(cfg.data.train)
    texts = [policy.render(coder_messages(problems[i % len(problems)])) for i in range(prompts)]
    seed = 0 if seeded else None
    policy.generate(
        texts[:1], SamplingParams(n=1, max_new_tokens=8, seed=None if seed is None else 1)
    )  # warm-up
    params = SamplingParams(
        n=n, temperature=1.0, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed, batch_size=prompts * n
    )
    start, cpu = time.perf_counter(), time.process_time()
    out = policy.generate(texts, params)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    tokens = sum(len(c.completion_ids) for c in out)
    return {
        "engine": engine, "dtype": dtype, "load_s": load, "tokens": tokens, "seconds": seconds,
        "cpu_s": cpu, "seeded": seeded,
    }  # fmt: skip


def child(args: argparse.Namespace, engine: str, dtype: str, *, seeded: bool = True) -> dict | None:
    """:func:`measure` in a fresh process; None (with the reason printed) when it fails."""
    cmd = [sys.executable, __file__, "--one", engine, dtype, "--preset", args.preset, "--prompts",
           str(args.prompts), "--n", str(args.n), "--max-new-tokens", str(args.max_new_tokens),
           "--top-p", str(args.top_p)]  # fmt: skip
    if not seeded:
        cmd.append("--unseeded")
    return child_json(cmd, f"{engine} {dtype}")


def child_json(cmd: list[str], what: str, env: dict[str, str] | None = None) -> dict | None:
    """The last JSON line a benchmark's child process printed (its environment ``env``, or this
    process's); None (with the reason, its last stderr line, printed as ``what: failed``) when it
    failed or printed none."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"  {what}: failed ({tail})", flush=True)
        return None
    return json.loads(lines[-1])


def throughput_table(args: argparse.Namespace) -> None:
    """Tokens/s per dtype and engine, with vLLM's speed-up over transformers."""
    print(f"\nrollout throughput, preset {args.preset}: {args.prompts} prompts x {args.n} samples, "
          f"<= {args.max_new_tokens} new tokens, T=1.0", flush=True)  # fmt: skip
    rows = [r for d in args.dtypes.split(",") for e in ENGINES if (r := child(args, e, d)) is not None]
    print(f"{'dtype':<10}{'engine':<14}{'load s':>8}{'tokens':>8}{'seconds':>9}{'tokens/s':>10}{'vs hf':>7}")
    for r in rows:
        base = next((b for b in rows if b["dtype"] == r["dtype"] and b["engine"] == "transformers"), None)
        rate = r["tokens"] / r["seconds"]
        ratio = rate / (base["tokens"] / base["seconds"]) if base else float("nan")
        print(f"{r['dtype']:<10}{r['engine']:<14}{r['load_s']:>8.1f}{r['tokens']:>8}{r['seconds']:>9.1f}"
              f"{rate:>10.1f}{ratio:>6.2f}x")  # fmt: skip


def seed_table(args: argparse.Namespace) -> None:
    """vLLM with one seed per request against unseeded, alternating, ``--repeats`` pairs; medians."""
    dtype = args.dtypes.split(",")[0]
    print(f"\nvLLM seeding, preset {args.preset}, {dtype}: {args.prompts} prompts x {args.n} samples, "
          f"<= {args.max_new_tokens} new tokens, T=1.0, top-p {args.top_p}, {args.repeats} pair(s)", flush=True)  # fmt: skip
    runs: dict[bool, list[dict]] = {True: [], False: []}
    for _ in range(args.repeats):
        for seeded in (True, False):
            if (r := child(args, "vllm", dtype, seeded=seeded)) is not None:
                runs[seeded].append(r)
    print(f"{'requests':<22}{'runs':>5}{'tokens':>8}{'wall s':>9}{'cpu s':>9}{'tokens/cpu s':>14}")
    medians = {}
    for seeded, rows in runs.items():
        if not rows:
            continue
        wall, cpu = statistics.median(r["seconds"] for r in rows), statistics.median(r["cpu_s"] for r in rows)
        tokens = statistics.median(r["tokens"] for r in rows)
        medians[seeded] = cpu / tokens
        name = "one seed per request" if seeded else "unseeded"
        print(f"{name:<22}{len(rows):>5}{tokens:>8.0f}{wall:>9.1f}{cpu:>9.1f}{tokens / cpu:>14.1f}")
    if len(medians) == 2:
        print(f"CPU per token, seeded / unseeded: {medians[True] / medians[False]:.3f}")


def step_table(args: argparse.Namespace) -> None:
    """Mean step time and rollout phases of ``codea1 train`` with each rollout engine."""
    print(f"\ncodea1 train --preset {args.preset}, {args.steps} step(s) per engine", flush=True)
    print(f"{'engine':<14}{'wall s':>8}{'step s':>8}{'coder rollout':>15}{'tester rollout':>16}{'push':>7}"
          f"{'update':>8}{'trained tokens':>16}")  # fmt: skip
    rows = {}
    for engine in ENGINES:
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / "run"
            cmd = [sys.executable, "-m", "codea1", "train", "--preset", args.preset, "--steps", str(args.steps),
                   "--run-dir", str(run_dir), "--progress", "plain", "--set", f"engine.rollout={engine}",
                   *[x for o in args.overrides for x in ("--set", o)]]  # fmt: skip
            start = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - start
            if done.returncode != 0:
                print(f"{engine:<14}failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
                continue
            metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]

        def mean(key: str, rows_: list = metrics) -> float:
            return sum(r.get(key, 0.0) for r in rows_) / len(rows_)

        rows[engine] = mean("time/step")
        update = sum(mean(f"time/{k}") for k in ("update", "update_coder", "update_tester"))
        trained = mean("loss/coder/tokens") + mean("loss/tester/tokens")  # the work differs by engine
        print(f"{engine:<14}{wall:>8.1f}{rows[engine]:>8.1f}{mean('time/coder_rollout'):>15.1f}"
              f"{mean('time/tester_rollout'):>16.1f}{mean('time/push_weights'):>7.2f}{update:>8.1f}"
              f"{trained:>16.0f}", flush=True)  # fmt: skip
    if len(rows) == 2:
        print(f"step speed-up with vLLM: {rows['transformers'] / rows['vllm']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny-cpu")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--steps", type=int, default=0, help="also time N training steps per engine")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="passed to codea1 train")
    ap.add_argument("--seeds", action="store_true", help="only vLLM, seeded per request vs unseeded")
    ap.add_argument("--repeats", type=int, default=3, help="pairs of runs for --seeds")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--one", nargs=2, metavar=("ENGINE", "DTYPE"), help=argparse.SUPPRESS)
    ap.add_argument("--unseeded", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        row = measure(
            args.preset, *args.one, args.prompts, args.n, args.max_new_tokens,
            seeded=not args.unseeded, top_p=args.top_p,
        )  # fmt: skip
        print(json.dumps(row))
        return
    if args.seeds:
        seed_table(args)
        return
    throughput_table(args)
    if args.steps:
        step_table(args)


if __name__ == "__main__":
    main()
