"""Where a CPU training step's time goes, against the machine's own matrix-multiply rate.

For one preset, fresh processes measure:

1. the roofline: a GEMM of the learner's largest shape (micro-batch tokens x hidden @ hidden x
   intermediate, the learner's dtype), in GFLOP/s, in a process that builds nothing;
2. then, once per rollout engine (``transformers`` and ``vllm``), a process that builds the run's
   roles (``codea1.engine.build.build``, the trainer's own path) and times the same GEMM again,
   with ``torch.get_num_threads()`` before and after the build (what building the engine did to the
   process), and then the phases of a step on fixed work: sampling the coder prompts and the
   white-box tester prompts (each problem's reference solution as the code under attack); then,
   on one fixed batch per role (the real prompts, completions of ``max_new_tokens`` seeded draws
   from the prompts' tokens, the same in both processes), the reference log-prob pass, the first
   ``train_step`` (the update) and repeated ones.

Each phase's FLOPs are the least work it needs, counted from the model's shape
(:func:`least_flops`): 2 x decoder weights per token forward plus causal attention, the output head
only where log-probs are taken, each distinct prompt once per micro-batch (or once per sampling
call), as the learner's shared rows and vLLM's prefix cache compute it. An update is forward +
backward: 3 forwards for full weights, 2 for LoRA (frozen weights need no weight gradients), one
more with gradient checkpointing. Sampling's share is low by nature (decoding one token at a time
reads every weight per token); the learner's phases are the ones the GEMM rate bounds. Beside each
phase: CPU and system seconds, minor page faults, and which threads of the process used the CPU
(an engine's threads working while the learner computes would show there; on the Ray backend only
the driver's threads are seen).

Usage: ``python benchmarks/roofline_bench.py [--preset tiny-cpu] [--engines transformers,vllm]
[--problems 2] [--repeats 3] [--rounds 1] [--set KEY=VALUE ...] [--json FILE]``. With
``--set engine.cpu_malloc=tcmalloc`` (or a preset that sets it) the measuring processes start
with TCMalloc preloaded, as ``codea1 train`` runs them. With
``--rounds N`` the engines' processes alternate N times (A B A B ...) and the table holds medians,
followed by each round's ratio and each engine's spread over its own rounds: on a shared machine the
rate drifts by more than 10 % from one process to the next, the same engine included (demo-cpu's
updates 1.1-1.6x between one engine's own rounds, docs/LOG.md, 2026-12-05), so one pair cannot
decide a 10 % bound. Slow (minutes); run it alone, the numbers are meaningless under CPU contention.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from codea1.engine.memory import ModelShape

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rollout_bench import child_json  # noqa: E402  (benchmarks/, this script's directory)

ENGINES = ("transformers", "vllm")
GEMM_REPEATS = 7


def model_shape(cfg) -> ModelShape:  # noqa: ANN001 - a codea1 RunConfig
    """The coder model's :class:`~codea1.engine.memory.ModelShape`, from its ``config.json`` only."""
    from transformers import AutoConfig

    from codea1.engine.loading import model_location

    location = model_location(cfg.engine.coder_model, cfg.engine.cache_dir)
    return ModelShape.from_hf_config(AutoConfig.from_pretrained(location), location)


def micro_batch_tokens(cfg) -> int:  # noqa: ANN001 - a codea1 RunConfig
    """Rows of the roofline GEMM: a coder micro-batch of half-length prompts and a full completion."""
    return cfg.coder.optim.micro_batch_size * (
        cfg.coder.sampling.max_prompt_tokens // 2 + cfg.coder.sampling.max_new_tokens
    )


def prompt_group_flops(shape: ModelShape, prompt: int, completions: Sequence[int], *, head: bool) -> float:
    """FLOPs of one forward pass over a prompt of ``prompt`` tokens computed once and its
    ``completions`` (their lengths) attending to it: the decoder layers' weights on every token
    (2 FLOPs per weight), causal attention (QK^T and AV: 2 x layers x hidden per query-key pair,
    L^2/2 pairs in a causal block of L tokens, P x C between a completion and its prompt), and, with
    ``head``, the output head (vocabulary x hidden) on the completion tokens. One completion gives a
    plain sequence of ``prompt + completion`` tokens."""
    tokens = prompt + sum(completions)
    pairs = prompt**2 + sum(2 * prompt * c + c**2 for c in completions)
    head_tokens = sum(completions) if head else 0
    return (
        2.0 * shape.layers * shape.layer_params * tokens
        + 2.0 * shape.layers * shape.hidden * pairs
        + 2.0 * shape.vocab * shape.hidden * head_tokens
    )


def least_flops(
    shape: ModelShape,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[int],
    micro: int,
    *,
    head: bool = True,
) -> float:
    """The least forward work of a batch as the learner cuts it (``micro`` sequences at a time, in
    order): within a micro-batch each distinct prompt is computed once (the learner's shared rows,
    ``engine.hf_local.logprobs``; vLLM's prefix cache when sampling), every completion in full."""
    total = 0.0
    for start in range(0, len(prompts), micro):
        groups: dict[tuple[int, ...], list[int]] = {}
        for p, c in zip(prompts[start : start + micro], completions[start : start + micro], strict=True):
            groups.setdefault(tuple(p), []).append(c)
        total += sum(prompt_group_flops(shape, len(p), cs, head=head) for p, cs in groups.items())
    return total


def update_factor(lora: bool, checkpointing: bool) -> float:
    """Forward passes' worth of work in one update: forward, activation gradients, and weight
    gradients unless the weights are frozen (LoRA); a recomputed forward with checkpointing."""
    return (2.0 if lora else 3.0) + (1.0 if checkpointing else 0.0)


def gemm_rate(tokens: int, hidden: int, intermediate: int, dtype) -> float:  # noqa: ANN001 - torch.dtype
    """Median GFLOP/s of ``(tokens x hidden) @ (hidden x intermediate)`` in ``dtype`` on this CPU."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(tokens, hidden, generator=gen).to(dtype)
    b = torch.randn(hidden, intermediate, generator=gen).to(dtype)
    flops = 2.0 * tokens * hidden * intermediate
    torch.matmul(a, b)  # warm-up
    rates = []
    for _ in range(GEMM_REPEATS):
        start = time.perf_counter()
        reps = 0
        while (elapsed := time.perf_counter() - start) < 0.3:
            torch.matmul(a, b)
            reps += 1
        rates.append(flops * reps / elapsed / 1e9)
    return statistics.median(rates)


def thread_ticks() -> dict[int, tuple[str, int]]:
    """CPU clock ticks (user + system) of each thread of this process, with its name (Linux ``/proc``)."""
    ticks = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # the thread ended
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks[int(task)] = (name, int(fields[11]) + int(fields[12]))
    return ticks


def busy_threads(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]]) -> list[list]:
    """``[name, seconds]`` of each thread that used CPU between two :func:`thread_ticks`, busiest first."""
    hz = os.sysconf("SC_CLK_TCK")
    used = [[name, (t - before.get(tid, (name, 0))[1]) / hz] for tid, (name, t) in after.items()]
    return sorted((u for u in used if u[1] > 0), key=lambda u: -u[1])


def timed(fn, repeats: int) -> dict[str, float]:  # noqa: ANN001 - a no-argument callable
    """Median wall seconds, CPU seconds, system CPU seconds and minor page faults of ``repeats``
    calls of ``fn``, the spread of the wall times (max / min), and the CPU seconds of each busy
    thread over all the calls (which threads did the work)."""
    rows, threads_before = [], thread_ticks()
    for _ in range(repeats):
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        fn()
        wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
        rows.append({
            "seconds": wall, "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
            "sys_s": after.ru_stime - before.ru_stime, "faults": after.ru_minflt - before.ru_minflt,
        })  # fmt: skip
    walls = [r["seconds"] for r in rows]
    medians = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    return medians | {
        "spread": max(walls) / min(walls),
        "threads": busy_threads(threads_before, thread_ticks()),
    }


def measure(preset: str, engine: str, overrides: list[str], problems_n: int, repeats: int) -> dict:
    """The phases of one engine, in this process (see the module docstring)."""
    import torch

    from codea1.config import load_config
    from codea1.data.problems import load_problems
    from codea1.data.prompts import coder_messages, tester_messages
    from codea1.engine.base import SamplingParams, TrainBatch
    from codea1.engine.build import build
    from codea1.engine.host_memory import tcmalloc_loaded
    from codea1.engine.loading import pick_device, pick_dtype
    from codea1.scoring import bind_policy_loss

    cfg = load_config(preset, [f"engine.rollout={engine}", *overrides])
    dtype = pick_dtype(cfg.engine.dtype, pick_device(cfg.engine.device))
    threads_before = torch.get_num_threads()
    problems = load_problems(cfg.data.train)[:problems_n]
    roles = build(cfg, problems)
    threads_after = torch.get_num_threads()
    shape = model_shape(cfg)
    row: dict = {
        "engine": engine, "dtype": str(dtype).removeprefix("torch."), "threads_before": threads_before,
        "threads_after": threads_after, "hidden": shape.hidden, "intermediate": shape.intermediate, "phases": {},
        "malloc": "tcmalloc" if tcmalloc_loaded() else "system",
    }  # fmt: skip
    # the roofline after the build; the one before it is measured in a process of its own (see main)
    row["gemm_after"] = gemm_rate(micro_batch_tokens(cfg), shape.hidden, shape.intermediate, dtype)
    lora = cfg.engine.mode == "adapters"
    factor = update_factor(lora, cfg.engine.gradient_checkpointing)
    loss_fn = bind_policy_loss(cfg.loss)
    rng = random.Random(0)
    for role, policy, role_learner, sampling in (
        ("coder", roles.coder_policy, roles.coder_learner, cfg.coder.sampling),
        ("tester", roles.tester_policy, roles.tester_learner, cfg.tester.sampling),
    ):
        messages = [
            coder_messages(p)
            if role == "coder"
            else tester_messages(p, p.reference, cfg.tester.tests_per_suite)
            for p in problems
        ]
        texts = [policy.render(m) for m in messages]
        params = SamplingParams(
            n=sampling.n, temperature=sampling.temperature, top_p=sampling.top_p,
            max_new_tokens=sampling.max_new_tokens, seed=0, batch_size=sampling.batch_size,
        )  # fmt: skip
        policy.generate(texts[:1], SamplingParams(n=1, max_new_tokens=4, seed=1))  # warm-up
        outs: list = []
        sampled = timed(lambda: outs.append(policy.generate(texts, params)), 1)  # noqa: B023
        out = outs[0]
        prompt_tokens = sum(len(c.prompt_ids) for c in out)
        new_tokens = sum(len(c.completion_ids) for c in out)
        # the least work: each prompt once (vLLM's prefix cache does that, transformers does not)
        flops = least_flops(
            shape, [c.prompt_ids for c in out], [len(c.completion_ids) for c in out], len(out)
        )
        row["phases"][f"{role} sampling"] = {"tokens": prompt_tokens + new_tokens, "flops": flops} | sampled  # fmt: skip

        prompt_ids = {c.prompt_index: c.prompt_ids for c in out}
        length = sampling.max_new_tokens
        ids = [prompt_ids[i] for i in sorted(prompt_ids) for _ in range(sampling.n)]
        vocab = sorted({t for p in ids for t in p})
        batch = TrainBatch(
            prompt_ids=ids,
            # completions of tokens drawn from the prompts: ids of the model's own vocabulary
            completion_ids=[tuple(rng.choice(vocab) for _ in range(length)) for _ in ids],
            advantages=[rng.choice((-1.0, 1.0)) for _ in ids],
        )
        tokens = sum(len(p) + length for p in ids)
        micro = (cfg.coder if role == "coder" else cfg.tester).optim.micro_batch_size
        forward = least_flops(shape, ids, [length] * len(ids), micro)
        if cfg.loss.keeps_reference:
            refs: list = []
            scored = timed(lambda: refs.append(role_learner.logprobs(batch, reference=True)), repeats)  # noqa: B023
            batch = TrainBatch(
                batch.prompt_ids, batch.completion_ids, batch.advantages, ref_logprobs=refs[-1]
            )
            row["phases"][f"{role} ref log-probs"] = {"tokens": tokens, "flops": forward} | scored
        # the first update creates the optimizer's state and meets every shape for the first time: a
        # run's step 1 pays for it, later steps do not
        first = timed(lambda: role_learner.train_step(batch, loss_fn), 1)  # noqa: B023
        row["phases"][f"{role} first update"] = {"tokens": tokens, "flops": forward * factor} | first
        updated = timed(lambda: role_learner.train_step(batch, loss_fn), repeats)  # noqa: B023
        row["phases"][f"{role} update"] = {"tokens": tokens, "flops": forward * factor} | updated
    roles.close()
    return row


def gemm_only(preset: str, overrides: list[str]) -> dict:
    """The GEMM rate and thread count of a process that has built nothing (the baseline)."""
    import torch

    from codea1.config import load_config
    from codea1.engine.loading import pick_device, pick_dtype

    cfg = load_config(preset, overrides)
    dtype = pick_dtype(cfg.engine.dtype, pick_device(cfg.engine.device))
    shape, tokens = model_shape(cfg), micro_batch_tokens(cfg)
    rate = gemm_rate(tokens, shape.hidden, shape.intermediate, dtype)
    return {"gemm": rate, "threads": torch.get_num_threads(), "tokens": tokens}


def child(args: argparse.Namespace, what: str) -> dict | None:
    """``--one WHAT`` in a fresh process, on the allocator ``codea1 train`` would run the
    configuration on (``engine.cpu_malloc``); None (with the reason printed) when it fails."""
    cmd = [sys.executable, __file__, "--one", what, "--preset", args.preset, "--problems", str(args.problems),
           "--repeats", str(args.repeats), *[x for o in args.overrides for x in ("--set", o)]]  # fmt: skip
    return child_json(cmd, what, env=args.child_env)


def child_environment(preset: str, overrides: list[str]) -> tuple[dict[str, str] | None, str]:
    """The measuring processes' environment (None: this process's own) and what they allocate with,
    by ``codea1 train``'s own rule (:func:`~codea1.cli.malloc_relaunch.malloc_in_use`): where a run
    would restart on TCMalloc, the children start with it preloaded."""
    from codea1.cli.malloc_relaunch import Relaunch, malloc_in_use
    from codea1.config import load_config

    try:
        return None, malloc_in_use(load_config(preset, overrides).engine, can_restart=True)
    except Relaunch as again:
        return again.environment(), "tcmalloc"


def cpu_name() -> str:
    """The CPU's model name and whether it computes bf16 natively (AVX512-BF16 or AMX)."""
    from codea1.engine.loading import cpu_has_native_bf16

    name = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores, {'with' if cpu_has_native_bf16() else 'without'} native bf16"


MEDIAN_KEYS = ("seconds", "cpu_s", "sys_s", "faults")


def merge_rounds(rounds: list[dict]) -> dict:
    """One engine's row from its rounds (fresh processes, the engines alternating): each phase's
    seconds, CPU and system seconds and page faults are the medians over the rounds, its
    ``rounds_seconds`` the list; the GEMM rate after the build is the median too; the rest is the
    first round's (the work is the same in every round)."""
    merged = dict(rounds[0], gemm_after=statistics.median(r["gemm_after"] for r in rounds), phases={})
    for phase, first in rounds[0]["phases"].items():
        cells = [r["phases"][phase] for r in rounds if phase in r["phases"]]
        merged["phases"][phase] = (
            dict(first)
            | {k: statistics.median(c[k] for c in cells) for k in MEDIAN_KEYS}
            | {"rounds_seconds": [c["seconds"] for c in cells]}
        )
    return merged


def per_token_ratio(base: dict, other: dict) -> float:
    """``other``'s seconds per token over ``base``'s, for two measurements of one phase."""
    return (other["seconds"] / other["tokens"]) / (base["seconds"] / base["tokens"])


def round_ratios(rounds: dict[str, list[dict]], phase: str) -> list[float]:
    """Per round, the second engine's seconds per token over the first's in ``phase`` (rounds run
    the engines one after the other, so each ratio pairs neighbours in time)."""
    first, second = (rounds[e] for e in list(rounds)[:2])
    return [
        per_token_ratio(a["phases"][phase], b["phases"][phase])
        for a, b in zip(first, second, strict=False)
        if phase in a["phases"] and phase in b["phases"]
    ]


def engine_spread(rounds: list[dict], phase: str) -> float | None:
    """One engine's slowest round over its fastest in ``phase``, per token: how far two fresh
    processes of the same engine and work differ (None with fewer than two rounds)."""
    per_token = [
        r["phases"][phase]["seconds"] / r["phases"][phase]["tokens"] for r in rounds if phase in r["phases"]
    ]
    return max(per_token) / min(per_token) if len(per_token) > 1 else None


def print_table(base: dict, rows: list[dict]) -> None:
    """Phase x engine: seconds, GFLOP/s and share of the roofline (the best of the GEMM rates
    measured, this machine's noise being what it is); the last column compares the second engine's
    seconds per token with the first's. The tokens and GFLOP columns are the first engine's (sampled
    lengths differ between engines; each engine's rate uses its own)."""
    roof = max([base["gemm"], *(r["gemm_after"] for r in rows)])
    print(f"\nroofline: GEMM {base['tokens']} x {rows[0]['hidden']} @ {rows[0]['hidden']} x "
          f"{rows[0]['intermediate']} ({rows[0]['dtype']}), best of the measurements below: {roof:.1f} GFLOP/s")  # fmt: skip
    print(f"  in a process that built nothing: {base['gemm']:.1f} GFLOP/s, {base['threads']} torch threads")
    for r in rows:
        print(f"  after building with {r['engine']}: {r['gemm_after']:.1f} GFLOP/s, "
              f"torch threads {r['threads_before']} -> {r['threads_after']}, malloc {r['malloc']}")  # fmt: skip
    head = f"{'phase':<22}{'tokens':>8}{'GFLOP':>8}"
    for r in rows:
        head += f"{r['engine'] + ' s':>16}{'cpu s':>8}{'sys s':>7}{'faults':>9}{'GFLOP/s':>9}{'roof':>6}"
    if len(rows) == 2:
        head += f"{'s/token ' + rows[1]['engine'] + '/' + rows[0]['engine']:>26}"
    print(head)
    for phase in rows[0]["phases"]:
        cells = [r["phases"].get(phase) for r in rows]
        if any(c is None for c in cells):
            continue
        line = f"{phase:<22}{cells[0]['tokens']:>8}{cells[0]['flops'] / 1e9:>8.0f}"
        for c in cells:
            rate = c["flops"] / c["seconds"] / 1e9
            line += (
                f"{c['seconds']:>16.2f}{c['cpu_s']:>8.2f}{c['sys_s']:>7.2f}{c['faults']:>9.0f}"
                f"{rate:>9.1f}{rate / roof:>6.0%}"
            )
        if len(cells) == 2:
            line += f"{per_token_ratio(*cells):>26.2f}"
        print(line)
    print("threads that used CPU in each learner phase (CPU seconds over its repeats; the learner's are"
          " the main thread and torch's OpenMP workers, which carry the process's name):")  # fmt: skip
    for r in rows:
        for phase, c in r["phases"].items():
            if "sampling" not in phase:
                top = ", ".join(f"{name} {sec:.1f}" for name, sec in c["threads"][:6])
                print(f"  {r['engine']:<13}{phase:<22}{len(c['threads']):>3} busy: {top}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked before anything runs: engines, counts, the configuration (preset and
    ``--set`` values) and the ``--json`` file's directory; a bad one is a one-line error (exit 2)."""
    ap = argparse.ArgumentParser(prog="roofline_bench.py", description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny-cpu")
    ap.add_argument("--engines", default=",".join(ENGINES), help="rollout engines, side by side")
    ap.add_argument("--problems", type=int, default=2, help="problems sampled per role (a step's)")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats of each learner phase (median)")
    ap.add_argument(
        "--rounds", type=int, default=1, help="fresh processes per engine, the engines alternating (medians)"
    )
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="a configuration override")
    ap.add_argument("--json", help="also write the measurements to this JSON file")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.engine_list = [e for e in args.engines.split(",") if e]
    if not args.engine_list or any(e not in ENGINES for e in args.engine_list):
        ap.error(f"--engines: expected a comma-separated list of {', '.join(ENGINES)}, got {args.engines!r}")
    if args.problems < 1 or args.repeats < 1 or args.rounds < 1:
        ap.error("--problems, --repeats and --rounds must be at least 1")
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        ap.error(f"--json: no directory {os.path.dirname(os.path.abspath(args.json))}")
    from codea1.config import ConfigError, load_config

    try:
        load_config(args.preset, args.overrides)
    except ConfigError as e:
        ap.error(str(e).splitlines()[0])
    args.child_env, args.malloc = child_environment(args.preset, args.overrides)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.one:
        if args.one == "gemm":
            print(json.dumps(gemm_only(args.preset, args.overrides)))
        else:
            print(json.dumps(measure(args.preset, args.one, args.overrides, args.problems, args.repeats)))
        return
    print(
        f"preset {args.preset} {' '.join(args.overrides)} | {cpu_name()} | malloc {args.malloc}", flush=True
    )
    base = child(args, "gemm")
    rounds: dict[str, list[dict]] = {e: [] for e in args.engine_list}
    for _ in range(args.rounds):  # A B A B ...: the machine's drift falls on both engines alike
        for e in args.engine_list:
            if (r := child(args, e)) is not None:
                rounds[e].append(r)
    rows = [merge_rounds(rs) for rs in rounds.values() if rs]
    if base and rows:
        print_table(base, rows)
        if args.rounds > 1 and len(rows) == 2:
            first, second = (r["engine"] for r in rows)
            print(f"per round, s/token {second}/{first}; then each engine's slowest round over its fastest"
                  " (a single pair cannot resolve a difference below these):")  # fmt: skip
            for phase in rows[0]["phases"]:
                if ratios := round_ratios(rounds, phase):
                    each = " ".join(f"{x:.2f}" for x in ratios)
                    spreads = " ".join(f"{e} {engine_spread(rounds[e], phase):.2f}" for e in (first, second))
                    print(f"  {phase:<22}{each}   median {statistics.median(ratios):.2f}   spread {spreads}")
    if args.json:
        found = {
            "cpu": cpu_name(),
            "preset": args.preset,
            "overrides": args.overrides,
            "malloc": args.malloc,
            "gemm": base,
            "rows": rows,
            "rounds": rounds,
        }
        with open(args.json, "w") as f:
            json.dump(found, f, indent=1)
    if base is None or any(len(rs) < args.rounds for rs in rounds.values()):
        sys.exit(1)  # a measurement failed (its reason is printed above)


if __name__ == "__main__":
    main()
