"""Where a training step's time goes, and what merged LoRA adapters buy for rollouts.

1. Runs ``codea1 train --preset PRESET --steps N`` in a temporary run directory, reads the per-phase
   ``time/*`` metrics and prints phase → seconds and share of the step, plus the share of time
   spent outside generation, update and execution (the loop's own overhead).
2. Builds the engine in ``adapters`` mode twice, sampling through merged weights and through the
   unmerged adapter layers, and prints rollout tokens/s side by side (same prompts, same seed).

Usage: ``python benchmarks/step_bench.py [--preset tiny-cpu] [--steps 1] [--no-adapters]``. Slow
(minutes); run it alone, the numbers are meaningless under CPU contention.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MAIN_PHASES = {
    "generation": ("coder_rollout", "tester_rollout"),
    "update": ("update_coder", "update_tester", "update", "push_weights"),
    "execution": ("execution",),
}


def phase_table(preset: str, steps: int, extra: list[str]) -> dict[str, float]:
    """Mean seconds per phase over the steps of a fresh run."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "codea1", "train", "--preset", preset, "--steps", str(steps),
               "--run-dir", str(run_dir), "--progress", "plain", *extra]  # fmt: skip
        start = time.perf_counter()
        subprocess.run(cmd, check=True)
        wall = time.perf_counter() - start
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keys = sorted({k for r in rows for k in r if k.startswith("time/")})
    means = {k.removeprefix("time/"): sum(r.get(k, 0.0) for r in rows) / len(rows) for k in keys}
    step = means.pop("step")
    print(f"\n{preset}: {steps} step(s), command wall time {wall:.1f} s (model loading included)")
    print(f"{'phase':<18}{'seconds':>10}{'share':>9}")
    for name, sec in sorted(means.items(), key=lambda kv: -kv[1]):
        print(f"{name:<18}{sec:>10.2f}{sec / step:>9.1%}")
    print(f"{'step':<18}{step:>10.2f}{1:>9.1%}")
    main = sum(means.get(p, 0.0) for group in MAIN_PHASES.values() for p in group)
    for group, phases in MAIN_PHASES.items():
        print(f"  {group:<16}{sum(means.get(p, 0.0) for p in phases) / step:>19.1%}")
    print(f"  {'outside generation, update and execution':<42}{(step - main) / step:>7.1%}")
    return means | {"step": step}


def rollout_throughput(preset: str, n_prompts: int, n: int, max_new_tokens: int) -> None:
    """Tokens/s of coder rollouts with merged vs unmerged adapters (adapters mode)."""
    from codea1.config import load_config
    from codea1.data.problems import load_problems
    from codea1.data.prompts import coder_messages
    from codea1.engine.base import SamplingParams, push_weights
    from codea1.engine.hf_local import build_roles

    cfg = load_config(preset, ["engine.mode=adapters"])
    problems = load_problems(cfg.data.train)[:n_prompts]
    params = SamplingParams(n=n, temperature=1.0, max_new_tokens=max_new_tokens, seed=0)
    results = {}
    for rollout in ("merged", "unmerged"):
        roles = build_roles(
            cfg.engine, cfg.coder.optim, cfg.tester.optim, 1, temperature_coder=1.0, temperature_tester=1.0,
            batch_size=n_prompts * n, rollout=rollout,
        )  # fmt: skip
        prompts = [roles.coder_policy.render(coder_messages(p)) for p in problems]
        push_weights(roles.coder_learner, roles.coder_policy)
        start = time.perf_counter()
        out = roles.coder_policy.generate(prompts, params)
        sec = time.perf_counter() - start
        tokens = sum(len(c.completion_ids) for c in out)
        results[rollout] = (tokens, sec)
        del roles
    print(f"\nrollout throughput, {cfg.engine.coder_model}, adapters mode, {n_prompts} prompts x {n}, "
          f"<= {max_new_tokens} new tokens")  # fmt: skip
    print(f"{'rollout':<10}{'tokens':>8}{'seconds':>10}{'tokens/s':>10}")
    for name, (tokens, sec) in results.items():
        print(f"{name:<10}{tokens:>8}{sec:>10.1f}{tokens / sec:>10.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny-cpu")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="passed to codea1 train")
    ap.add_argument("--no-adapters", action="store_true", help="skip the merged/unmerged comparison")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    args = ap.parse_args()
    phase_table(args.preset, args.steps, [x for o in args.overrides for x in ("--set", o)])
    if not args.no_adapters:
        rollout_throughput(args.preset, args.prompts, args.n, args.max_new_tokens)


if __name__ == "__main__":
    main()
