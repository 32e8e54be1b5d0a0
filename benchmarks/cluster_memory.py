"""GPU memory per learner rank and per vLLM engine of the ``paper-*`` presets, by arithmetic, and
``--check``: vLLM's start-up rule replayed on every GPU of every shipped GPU preset.

No model is loaded: the architecture numbers of Qwen2.5-Coder-{1.5B,3B,7B}-Instruct are written
below (from the models' ``config.json``), the batch and sequence sizes, the learner and replica
counts and the dtype come from the presets. Everything is in GiB (2**30 bytes). The arithmetic is
``codea1.engine.memory``'s, the one the engines are started with: its docstrings say what each term
counts (``learner_memory``, ``engine_overhead_gib``) and how a GPU's plan is made (``plan_gpu``).

The tables (default): a learner rank's peak, and a replica with the preset's KV cache. ``--check``:
for every ``paper-*`` preset, each layout (the ``-ray`` presets as shipped, ``placement: split``,
and ``colocate`` with a derived KV cache; the local presets on the local backend with vLLM
rollouts), on 80 GB and 141 GB GPUs (the memory torch reports of them, rounded down), and every
``-ray`` preset on the reference's node (:data:`REFERENCE_NODE`: 8 × 80 GB, 4 GPUs per role, learner
ranks and replicas colocated, the preset's own KV cache), the plan of each GPU: what it holds beside
the awake engines, each engine's ``gpu_memory_utilization``, KV cache and ``max_num_seqs``, vLLM's
start-up check (free >= utilization x total) in start order, what it holds while the engines sleep
and the learners compute (colocated layouts), the peak, and a verdict:

* ``PASS``: every engine starts and the peak of either phase fits with the headroom
  (``memory.HEADROOM_FRACTION`` of the GPU) free;
* ``does not fit: ...``: no plan leaves an engine a KV cache for one prompt's samples at full length
  (or the learners alone exceed the GPU); the verdict says what to run instead. Not a failure:
  that layout is not one the preset is meant for;
* ``FAIL: ...``: a plan that vLLM would refuse, or a ``-ray`` preset's own layout that does not fit.

Below the GPUs, ``--check`` prints the host memory of the node each ``-ray`` preset runs on, in the
reference node's layout, with the node's host memory assumed (:data:`NODE_HOST_GIB`, ``--host-gib``):
``codea1.engine.host_plan.ray_node_host_plan``'s terms, its start, steady state and peak, and the
start as it was when every rank read its own copy; ``FAIL`` when the peak exceeds the node's memory
less :data:`HOST_HEADROOM_FRACTION`.

The exit status is 1 when any row is ``FAIL``, else 0.

Usage: ``python benchmarks/cluster_memory.py [--gpu-gib 80] [--preset paper-1.5b-ray ...]``,
``python benchmarks/cluster_memory.py --check [--gpu-gib G ...] [--preset P ...] [--set KEY=VALUE ...]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from codea1.config import ConfigError, RunConfig, load_config, preset_names
from codea1.engine.build import shares_one_model
from codea1.engine.host_plan import ray_node_host_plan
from codea1.engine.memory import (
    GIB,
    LEARNER_OVERHEAD_GIB,
    EngineMemory,
    GpuPlan,
    LearnerMemory,
    ModelShape,
    dtype_bytes,
    engine_memory,
    learner_memory,
    local_plan,
    ray_plans,
    startup_replay,
)

__all__ = ["GIB", "LEARNER_OVERHEAD_GIB", "LearnerMemory", "ModelShape", "dtype_bytes", "learner_memory"]

PRESETS = ("paper-1.5b-ray", "paper-3b-ray", "paper-7b-ray")
CHECK_GPUS = (("80 GB (79 GiB)", 79.0), ("141 GB (139 GiB)", 139.0))
"""The GPUs ``--check`` plans for: name and the GiB torch reports of it, rounded down (an A100 or
H100 80 GB reports about 79.2, an H200 141 GB about 139.8)."""
NODE_HOST_GIB = 1024.0
"""Host memory of the node the ``-ray`` presets are planned on (:data:`REFERENCE_NODE`), an
assumption: the reference's configuration does not state it; 1 TiB is an 8 × A100 80 GB DGX's
smaller option (a DGX H100 has 2 TB). ``--host-gib`` plans another."""
HOST_HEADROOM_FRACTION = 0.1
"""The share of a node's host memory a plan leaves to the system, the page cache, Ray's object
store and the sandbox's workers."""
REFERENCE_NODE_NAME = "reference node: 8 × 80 GB, 4 + 4 per role, colocate"
REFERENCE_NODE = (
    "cluster.learner_workers=4",
    "cluster.rollout_replicas=4",
    "cluster.placement=colocate",
    "cluster.gpus_per_worker=1",
)
"""The reference's hardware (``code/rl/config/7B_A1.yaml`` of the official Code-A1 code): one node
of 8 GPUs, 4 per role, learner and vLLM colocated; planned on 80 GB GPUs whatever ``--gpu-gib`` says."""
ReplicaMemory = EngineMemory
replica_memory = engine_memory

MODELS = {
    m.name: m
    for m in (
        ModelShape("Qwen/Qwen2.5-Coder-1.5B-Instruct", 28, 1536, 8960, 12, 2, 151936, tied=True),
        ModelShape("Qwen/Qwen2.5-Coder-3B-Instruct", 36, 2048, 11008, 16, 2, 151936, tied=True),
        ModelShape("Qwen/Qwen2.5-Coder-7B-Instruct", 28, 3584, 18944, 28, 4, 152064, tied=False),
    )
}
"""Architecture numbers from each model's ``config.json`` on the Hugging Face hub."""


def model_of(cfg: RunConfig, role: str) -> ModelShape:
    """The architecture of ``role``'s model; a clear error for a model not listed here."""
    spec = cfg.engine.role_model(role)
    if spec not in MODELS:
        raise SystemExit(f"cluster_memory: no architecture numbers for {spec!r}; known: {', '.join(MODELS)}")
    return MODELS[spec]


def largest_micro_batch(cfg: RunConfig, role: str, model: ModelShape, gpu_gib: float) -> int:
    """The largest ``micro_batch_size`` whose worst case fits ``gpu_gib`` with fp32 states; 0 if none."""
    fitting = [m for m in range(1, 65) if learner_memory(cfg, role, model, m).total_fp32_states <= gpu_gib]
    return max(fitting, default=0)


def learner_table(names: list[str], gpu_gib: float) -> list[str]:
    """Markdown rows of the learner-rank table."""
    out = [
        "| preset | role | model | params | ranks | micro-batch tokens (worst) | weights+grads+AdamW "
        "fp32 (bf16) | reference | FSDP2 buffers | activations worst (at 32k tokens) | allowance | "
        f"**rank total** fp32 states (bf16) | fits {gpu_gib:g} GiB | largest micro-batch that fits |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|",
    ]
    for name in names:
        cfg = load_config(name)
        for role in ("coder", "tester"):
            model = model_of(cfg, role)
            m = learner_memory(cfg, role, model)
            fits = (
                "yes"
                if m.total_fp32_states <= gpu_gib
                else "bf16 states only"
                if m.total <= gpu_gib
                else "no"
            )
            micro = largest_micro_batch(cfg, role, model, gpu_gib)
            out.append(
                f"| {name} | {role} | {model.name.split('/')[-1]} | {model.params / 1e9:.2f} B | {m.ranks} "
                f"| {m.tokens:,} | {m.states_fp32:.1f} ({m.states_bf16:.1f}) | {m.reference:.1f} "
                f"| {m.fsdp_buffers:.1f} | {m.activations:.1f} ({m.activations_paper_budget:.1f}) "
                f"| {m.overhead:.1f} | **{m.total_fp32_states:.1f}** ({m.total:.1f}) | {fits} | {micro} |"
            )
    return out


def replica_table(names: list[str], gpu_gib: float) -> list[str]:
    """Markdown rows of the replica table, with the KV room left if a replica shared a learner's GPU."""
    out = [
        "| preset | model | replicas per role | placement | weights | KV cache configured "
        "(full batch at full length) | overhead | **replica total** | fits "
        f"{gpu_gib:g} GiB | KV room if colocated with the larger learner rank |",
        "|---|---|--:|---|--:|--:|--:|--:|---|--:|",
    ]
    for name in names:
        cfg = load_config(name)
        model = model_of(cfg, "coder")
        r = replica_memory(cfg, model)
        rank = max(
            learner_memory(cfg, role, model_of(cfg, role)).total_fp32_states for role in ("coder", "tester")
        )
        fits = "yes" if r.total <= gpu_gib else "no"
        room = gpu_gib - rank - r.weights - r.overhead
        out.append(
            f"| {name} | {model.name.split('/')[-1]} | {cfg.cluster.rollout_replicas} | {cfg.cluster.placement} "
            f"| {r.weights:.1f} | {r.kv_cache:.1f} ({r.kv_full_batch:.1f}) | {r.overhead:.1f} "
            f"| **{r.total:.1f}** | {fits} | {room:.1f} |"
        )
    return out


@dataclass(frozen=True)
class Layout:
    """One layout ``--check`` plans a preset in: its name, configuration and what a misfit means."""

    name: str
    cfg: RunConfig
    required: bool
    """A layout the preset is made for: not fitting is a FAIL."""
    instead: str
    """What to run where it does not fit (for layouts that are not required)."""
    gpus: tuple[tuple[str, float], ...] = ()
    """The GPUs this layout is planned on (empty: those of the command line)."""


def layouts(name: str, overrides: list[str]) -> Iterator[Layout]:
    """The layouts of preset ``name``: a ``-ray`` preset as shipped and with the other placement
    (its KV cache derived), a local preset on the local backend with vLLM rollouts."""
    cfg = load_config(name, overrides)
    if cfg.engine.backend == "ray":
        shipped = cfg.cluster.placement
        yield Layout(f"ray {shipped}", cfg, True, "")
        other = "colocate" if shipped == "split" else "split"
        again = [*overrides, f"cluster.placement={other}", "engine.vllm_kv_cache_gib=0"]
        yield Layout(f"ray {other}", load_config(name, again), False, f"use placement {shipped}")
        node = load_config(name, [*overrides, *REFERENCE_NODE])
        yield Layout(REFERENCE_NODE_NAME, node, True, "", (CHECK_GPUS[0],))
        return
    ray = f"{name}-ray"
    instead = ""
    if ray in preset_names():
        instead = f"use {ray} ({ray_gpus(load_config(ray)):g} GPUs)"
    yield Layout("local, 1 GPU", load_config(name, [*overrides, "engine.rollout=vllm"]), False, instead)


def ray_gpus(cfg: RunConfig) -> float:
    """GPUs of a Ray run of two roles: a bundle per learner rank and per replica (``split``), or
    replica ``i`` in learner rank ``i``'s bundle (``colocate``), as ``placement.plan`` lays them out."""
    c = cfg.cluster
    replicas = (
        max(0, c.rollout_replicas - c.learner_workers) if c.placement == "colocate" else c.rollout_replicas
    )
    return 2 * (c.learner_workers + replicas) * c.gpus_per_worker


def plans(layout: Layout, total_gib: float) -> list[GpuPlan]:
    """The plan of every kind of GPU of ``layout`` on GPUs of ``total_gib``."""
    cfg = layout.cfg
    shared = shares_one_model(cfg.train)
    models = {r: model_of(cfg, r) for r in ("coder", "tester")}
    if cfg.engine.backend == "ray":
        return ray_plans(cfg, models, total_gib, shared=shared)
    return [local_plan(cfg, models, total_gib, shared=shared)]


def verdict(layout: Layout, plan: GpuPlan) -> str:
    """``PASS``, ``does not fit: ...`` or ``FAIL: ...`` (see the module docstring)."""
    if plan.problem:
        instead = f"; {layout.instead}" if layout.instead else ""
        return f"{'FAIL' if layout.required else 'does not fit'}: {plan.problem}{instead}"
    violations = startup_replay(plan).violations
    return f"FAIL: {'; '.join(violations)}" if violations else "PASS"


def check_table(
    names: list[str], gpus: list[tuple[str, float]], overrides: list[str]
) -> tuple[list[str], int]:
    """Markdown rows of the ``--check`` table and the number of FAIL rows."""
    out = [
        "| preset | layout | GPU | this GPU holds | resident | engines: utilization, KV GiB (full-length "
        "sequences), max_num_seqs | vLLM start: free vs requested | engines asleep, learners computing "
        "| peak | verdict |",
        "|---|---|---|---|--:|---|---|--:|--:|---|",
    ]
    failures = 0
    for name in names:
        for layout in layouts(name, overrides):
            for label, total in layout.gpus or gpus:
                for plan in plans(layout, total):
                    replay = startup_replay(plan)
                    engines = "; ".join(
                        f"{e.utilization:.3f}, {e.kv_gib:.1f} ({e.full_sequences}), {e.max_num_seqs}"
                        for e in plan.engines
                    )
                    starts = "; ".join(
                        f"{s.free_gib:.1f} {'≥' if s.free_gib >= s.requested_gib else '<'} {s.requested_gib:.1f}"
                        for s in replay.starts
                    )
                    if plan.problem:
                        engines = starts = "–"
                    result = verdict(layout, plan)
                    failures += result.startswith("FAIL")
                    out.append(
                        f"| {name} | {layout.name} | {label} | {plan.what} "
                        f"| {plan.resident_gib:.1f} | {engines or '–'} | {starts or '–'} "
                        f"| {f'{plan.asleep_gib:.1f}' if plan.asleep else '–'} | {replay.peak_gib:.1f} | {result} |"
                    )
    return out, failures


def host_table(names: list[str], overrides: list[str], host_gib: float) -> tuple[list[str], int]:
    """Markdown rows of the host memory of a node running each ``-ray`` preset on the reference
    node's layout (``codea1.engine.host_plan.ray_node_host_plan``), and the number of FAIL rows (the
    local presets, one GPU and no Ray node, have none: their host memory is not planned)."""
    out = [
        f"| preset | node | runtime | references | offloaded states | sleep backups | start (one read copy) "
        f"| steady | checkpoint save | **peak** | start before sharded_load (a read copy per rank) "
        f"| fits {host_gib:g} GiB less {HOST_HEADROOM_FRACTION:.0%} |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    failures = 0
    limit = host_gib * (1 - HOST_HEADROOM_FRACTION)
    for name in names:
        if load_config(name, overrides).engine.backend != "ray":
            continue
        cfg = load_config(name, [*overrides, *REFERENCE_NODE])
        shared = shares_one_model(cfg.train)
        h = ray_node_host_plan(cfg, {r: model_of(cfg, r) for r in ("coder", "tester")}, shared=shared)
        fits = h.peak <= limit
        failures += not fits
        before = h.start - h.reading + h.reading_per_rank
        out.append(
            f"| {name} | {REFERENCE_NODE_NAME}, {host_gib:g} GiB host | {h.runtime:.1f} | {h.references:.1f} "
            f"| {h.offloaded:.1f} | {h.sleep_backups:.1f} | {h.start:.1f} ({h.reading:.1f}) | {h.steady:.1f} "
            f"| +{h.saving:.1f} | **{h.peak:.1f}** | {before:.1f} ({h.reading_per_rank:.1f}) "
            f"| {'PASS' if fits else f'FAIL: over {limit:.0f} GiB'} |"
        )
    return out, failures


def main(argv: list[str] | None = None) -> int:
    """Print the learner and replica tables for the given presets, or with ``--check`` the plan of
    every GPU with a verdict (exit status 1 when a row fails)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", action="append", help="a preset (repeatable); default: the paper-* ones")
    ap.add_argument(
        "--gpu-gib", type=float, action="append", help="GPU memory in GiB (repeatable; default 80, "
        "with --check the 80 GB and 141 GB GPUs)"
    )  # fmt: skip
    ap.add_argument("--check", action="store_true", help="replay vLLM's start-up rule on every GPU's plan")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override (--check)")
    ap.add_argument(
        "--host-gib", type=float, default=NODE_HOST_GIB,
        help=f"the node's host memory in GiB (--check; default {NODE_HOST_GIB:g})",
    )  # fmt: skip
    args = ap.parse_args(argv)
    try:
        return report(args)
    except ConfigError as e:
        raise SystemExit(f"cluster_memory: {e}") from None


def report(args: argparse.Namespace) -> int:
    """What :func:`main` prints for its parsed arguments; its exit status."""
    if args.check:
        names = args.preset or [n for n in preset_names() if n.startswith("paper-")]
        gpus = [(f"{g:g} GiB", g) for g in args.gpu_gib] if args.gpu_gib else list(CHECK_GPUS)
        if args.host_gib <= 0:
            raise SystemExit(f"cluster_memory: --host-gib must be positive, got {args.host_gib:g}")
        rows, failures = check_table(names, gpus, args.set)
        host, host_failures = host_table(names, args.set, args.host_gib)
        print("Plan of every GPU (GiB); full-length sequences: of the longest prompt + completion.\n")
        print("\n".join(rows))
        print(f"\nHost memory of the node (GiB), beside its GPUs above: {REFERENCE_NODE_NAME}, "
              f"{args.host_gib:g} GiB of host memory (assumed).\n")  # fmt: skip
        print("\n".join(host))
        local = [n for n in names if load_config(n, args.set).engine.backend != "ray"]
        if local:
            print(f"\nNot planned (one GPU, no Ray node): {', '.join(local)}.")
        failures += host_failures
        print(f"\n{len(rows) - 2} GPU rows, {len(host) - 2} host rows, {failures} FAIL")
        return 1 if failures else 0
    names = args.preset or list(PRESETS)
    gpu = (args.gpu_gib or [80.0])[0]
    print("Learner rank (one per GPU), GiB; worst case = every row of a micro-batch at full length.\n")
    print("\n".join(learner_table(names, gpu)))
    print("\nRollout replica (one per GPU), GiB.\n")
    print("\n".join(replica_table(names, gpu)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
