"""What the Ray backend costs over the local one: the same training run, both backends, side by side.

Runs ``codea1 train`` twice on the same preset and model, with ``engine.backend=local`` and with
``engine.backend=ray`` (a local cluster, ``--learner-workers`` FSDP2 ranks per role,
``--rollout-replicas`` replicas), one after the other. From each run it reads the ``time/*`` phases
of ``metrics.jsonl`` (median over the steps after the first) and, from the moments the CLI prints
its ``step k/N`` lines, the time before the first step (start-up: imports, the cluster, the actors,
the models), between steps outside them (checkpoints) and after the last step (the last
checkpoint, stopping the actors). Prints a markdown table: phase | local s | ray s | overhead s |
ratio.

Usage: ``python benchmarks/cluster_bench.py [--model tiny|smollm2-135m|PATH] [--steps 4]
[--learner-workers 2] [--rollout-replicas 1] [--rollout transformers] [--set KEY=VALUE ...]``.
``tiny`` (the default) is a 2-layer random Llama built into a temporary directory (needs the
``demo`` extra for its tokenizer), so that the table shows the backend's overhead rather than
the model's compute. Slow (minutes, mostly start-up); run it alone, the numbers are meaningless
under CPU contention (the header gives the load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP_LINE = re.compile(r"^step (\d+)/(\d+) ")
OUTSIDE_STEPS = ("start-up", "between steps", "after the last step", "wall")
"""Rows timed from the CLI's output rather than from ``metrics.jsonl``."""


@dataclass
class RunTimes:
    """One run's timings: the command's wall time, when each step line was printed (seconds after
    the start) and the rows of ``metrics.jsonl``."""

    wall: float
    step_lines: dict[int, float] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)


def summarize(run: RunTimes) -> dict[str, float]:
    """Seconds per row of the table: each ``time/*`` phase and ``step`` (median over the steps
    after the first, or the only step), ``step 1``, and the rows of :data:`OUTSIDE_STEPS`."""
    rows = sorted(run.rows, key=lambda r: r["step"])
    later = rows[1:] or rows
    phases = sorted({k for r in rows for k in r if k.startswith("time/")} - {"time/step"})
    out = {k.removeprefix("time/"): statistics.median(r.get(k, 0.0) for r in later) for k in phases}
    out["step"] = statistics.median(r["time/step"] for r in later)
    out["step 1"] = rows[0]["time/step"]
    seconds = {r["step"]: r["time/step"] for r in rows}
    first, last = rows[0]["step"], rows[-1]["step"]
    out["start-up"] = run.step_lines[first] - seconds[first]
    gaps = [run.step_lines[s] - run.step_lines[s - 1] - seconds[s] for s in seconds if s > first]
    out["between steps"] = statistics.median(gaps) if gaps else 0.0
    out["after the last step"] = run.wall - run.step_lines[last]
    out["wall"] = run.wall
    return out


def markdown_table(local: dict[str, float], ray: dict[str, float]) -> str:
    """``phase | local s | ray s | overhead s | ratio``: the phases (longest on Ray first), the
    step, then the rows outside the steps."""
    phases = sorted(
        (k for k in set(local) | set(ray) if k not in ("step", "step 1", *OUTSIDE_STEPS)),
        key=lambda k: -ray.get(k, 0.0),
    )
    lines = ["| phase | local s | ray s | overhead s | ratio |", "|---|---:|---:|---:|---:|"]
    for name in [*phases, "step", "step 1", *OUTSIDE_STEPS]:
        a, b = local.get(name, 0.0), ray.get(name, 0.0)
        ratio = f"{b / a:.2f}" if a >= 0.0005 else "-"
        label = f"**{name}**" if name in ("step", "wall") else name
        lines.append(f"| {label} | {a:.3f} | {b:.3f} | {b - a:+.3f} | {ratio} |")
    return "\n".join(lines)


def train_command(run_dir: Path, preset: str, steps: int, settings: list[str]) -> list[str]:
    """The ``codea1 train`` command of one run."""
    sets = [arg for s in settings for arg in ("--set", s)]
    return [sys.executable, "-m", "codea1", "train", "--preset", preset, "--steps", str(steps),
            "--run-dir", str(run_dir), "--progress", "plain", *sets]  # fmt: skip


def timed_run(command: list[str], run_dir: Path) -> RunTimes:
    """Run ``command``, noting when each step line appears; its timings (exits on failure)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    times, output = RunTimes(wall=0.0), []
    for line in proc.stdout:
        output.append(line)
        match = STEP_LINE.match(line)
        if match:
            times.step_lines[int(match.group(1))] = time.perf_counter() - start
    proc.wait()
    times.wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"cluster_bench: {' '.join(command)} exited {proc.returncode}:\n{''.join(output[-30:])}")
    times.rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return times


def tiny_model(directory: Path) -> Path:
    """The tests' tiny random Llama (SmolLM2's tokenizer), written into ``directory``."""
    from codea1.engine.loading import DEMO_MODEL_INSTALL, demo_model_missing

    if demo_model_missing():
        sys.exit(f"cluster_bench: --model tiny needs the demo model ({DEMO_MODEL_INSTALL}) for its tokenizer")
    sys.path.insert(0, str(ROOT))
    from tests.tiny_model import make_tiny_model

    return make_tiny_model(directory)


def main(argv: list[str] | None = None) -> int:
    """Run both backends and print the table; returns 0."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model", default="tiny", help="tiny (random 2-layer Llama), smollm2-135m or a model spec"
    )
    p.add_argument("--preset", default="tiny-cpu")
    p.add_argument(
        "--steps", type=int, default=4, help="training steps of each run (the first is not in the medians)"
    )
    p.add_argument("--learner-workers", type=int, default=2, help="cluster.learner_workers")
    p.add_argument("--rollout-replicas", type=int, default=1, help="cluster.rollout_replicas")
    p.add_argument("--cpus-per-worker", type=float, default=0.25, help="cluster.cpus_per_worker")
    p.add_argument("--num-cpus", type=int, default=0, help="cluster.num_cpus of the local cluster (0 = all)")
    p.add_argument("--rollout", default="transformers", choices=("transformers", "vllm", "auto"))
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for both runs (repeatable)")  # fmt: skip
    args = p.parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="cluster-bench-") as tmp:
        model = str(tiny_model(Path(tmp) / "tiny")) if args.model == "tiny" else args.model
        common = [f"engine.coder_model={model}", f"engine.rollout={args.rollout}", *args.settings]
        cluster = [
            "engine.backend=ray", f"cluster.learner_workers={args.learner_workers}",
            f"cluster.rollout_replicas={args.rollout_replicas}", f"cluster.cpus_per_worker={args.cpus_per_worker}",
            f"cluster.num_cpus={args.num_cpus}",
        ]  # fmt: skip
        results = {}
        for backend, extra in (("local", ["engine.backend=local"]), ("ray", cluster)):
            run_dir = Path(tmp) / backend
            command = train_command(run_dir, args.preset, args.steps, [*common, *extra])
            print(f"{backend}: {' '.join(command)}", file=sys.stderr, flush=True)
            results[backend] = summarize(timed_run(command, run_dir))
    over = f"steps 2-{args.steps}" if args.steps > 1 else "step 1"
    print(f"\n{args.preset}, model {args.model}, {args.steps} steps (phases: median over {over}); ray: "
          f"{args.learner_workers} learner workers per role, {args.rollout_replicas} replica(s) per model, "
          f"rollouts {args.rollout}; 1-minute load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after, {os.cpu_count()} CPUs\n")  # fmt: skip
    print(markdown_table(results["local"], results["ray"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
