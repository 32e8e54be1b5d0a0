"""The train stage of ``scripts/gpu_check.sh``: ``codea1 train`` end to end for 2 steps on a
random-initialised model, with each step's GPU memory compared with the memory plan.

1. A random-init Qwen2 causal LM is built from a config into a work directory with the carried
   SmolLM2 tokenizer (``--tokenizer``, written by ``scripts/gpu_check.sh --prepare``): ``small`` is
   SmolLM2-135M's shape (30 layers, hidden 576, 135 M parameters, 270 MB in bf16), ``tiny`` a
   2-layer, hidden-128 one for a CPU (the shape of ``tests/tiny_model.py``). No weights, no download.
2. ``python -m codea1 train --preset paper-1.5b`` runs on it (:func:`train_command`): both roles in
   ``separate`` mode with the preset's fp32 master weights, KL reference, token budgets and
   Mistake Book, the real sandbox and the transformers engine (``engine.rollout=transformers``;
   ``--rollout vllm`` for vLLM's, ``--backend ray`` for the Ray backend), shrunk to 2 problems per
   step, 4 codes and 2 suites each, 128-token completions (16 with ``--tiny``) and 4,096-token
   micro-batches, on ``--device`` (cuda, or cpu for the same path on a CPU). The tester is
   black-box here: a random model writes no code that loads, so a white-box tester would get no
   prompt, and neither would its learner train. It is stopped after ``--timeout-s``; its output
   goes to stderr and ``WORK/train.log``.
3. Each step's ``memory/peak_gpu_gib`` (the caching allocator's peak; ``…_reserved_gib`` with its
   cached blocks) from the run's ``metrics.jsonl`` is compared with the plan (:func:`planned`):
   ``codea1.engine.memory.learner_memory``'s terms as ``local_plan`` adds them while the learners
   compute (fp32 states of both roles, the shared reference, the worst micro-batch's activations),
   with the KV cache of the largest transformers ``generate`` batch in place of the activations
   where it is larger; not the CUDA context, which torch does not count, nor vLLM engines, which
   this run does not start.

Rows (``--result FILE``, a JSON list, one row per line in ``scripts/gpu_check.sh``'s table):
``train (...)`` PASS when the run exits 0 after 2 steps with finite losses; ``train memory vs
plan`` PASS when every step's allocated peak is at most the plan (N/A on a CPU, where the metric is
absent). A run that cannot start its sandbox (``codea1 train`` says so in one line) or that hangs is
a FAIL with that line. Only the standard library is imported at module level (the dry run of
``scripts/gpu_check.sh`` reads :func:`train_command` without torch); torch, transformers and codea1
are imported where the model is built and the plan computed, from the installed copy.

Usage: ``python benchmarks/gpu_train.py --tokenizer DIR --work DIR [--device cuda|cpu] [--tiny]
[--rollout transformers|vllm] [--backend local|ray] [--timeout-s S] [--result FILE]``.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PRESET = "paper-1.5b"
STEPS = 2
GIB = float(1 << 30)


@dataclass(frozen=True)
class Shape:
    """A Qwen2 decoder's numbers (the vocabulary is the tokenizer's)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int


SHAPES = {
    "small": Shape(layers=30, hidden=576, intermediate=1536, heads=9, kv_heads=3),  # SmolLM2-135M's
    "tiny": Shape(layers=2, hidden=128, intermediate=256, heads=2, kv_heads=1),  # tests/tiny_model.py's
}


@dataclass
class Row:
    """One line of ``scripts/gpu_check.sh``'s table."""

    name: str
    verdict: str
    value: str
    how: str
    seconds: float | None = None
    data: dict[str, Any] = field(default_factory=dict)


def overrides(model: str, device: str, *, tiny: bool, rollout: str, backend: str) -> list[str]:
    """The ``--set`` values of the run: :data:`PRESET` shrunk to seconds per step."""
    new_tokens = 16 if tiny else 128
    sets = [
        "data.train=demo:easy-train", "data.problems_per_step=2",
        f"engine.coder_model={model}", f"engine.tester_model={model}",
        f"engine.rollout={rollout}", f"engine.device={device}", f"engine.backend={backend}",
        "coder.sampling.n=4", f"coder.sampling.max_new_tokens={new_tokens}",
        "coder.sampling.max_prompt_tokens=512", "coder.sampling.batch_size=8",
        "tester.sampling.n=2", f"tester.sampling.max_new_tokens={new_tokens}",
        "tester.sampling.max_prompt_tokens=1024", "tester.sampling.batch_size=16", "tester.view=blackbox",
        "coder.optim.micro_batch_tokens=4096", "tester.optim.micro_batch_tokens=4096",
        "coder.optim.warmup_steps=1", "tester.optim.warmup_steps=1",
        "sandbox.workers=4", "tracking.samples_per_step=4", "tracking.progress=plain",
    ]  # fmt: skip
    if backend == "ray":  # one GPU: each role's learner rank and replica share it
        gpus = "0.25" if device.startswith("cuda") else "0"
        sets += [
            "cluster.learner_workers=1", "cluster.rollout_replicas=1", "cluster.placement=colocate",
            f"cluster.gpus_per_worker={gpus}", "cluster.num_cpus=8", "cluster.sandbox_fanout=false",
        ]  # fmt: skip
    return sets


def train_command(
    python: str, model: str, run_dir: str, device: str, *, tiny: bool, rollout: str, backend: str
) -> list[str]:
    """The ``codea1 train`` command line of the stage (run from the work directory, so that the
    installed codea1 is imported, not the repository's)."""
    sets = overrides(model, device, tiny=tiny, rollout=rollout, backend=backend)
    command = [
        python,
        "-m",
        "codea1",
        "train",
        "--preset",
        PRESET,
        "--steps",
        str(STEPS),
        "--run-dir",
        run_dir,
    ]
    for value in sets:
        command += ["--set", value]
    return command


def build_model(directory: Path, tokenizer_dir: Path, shape: Shape, dtype_name: str) -> dict[str, Any]:
    """Write a random-init Qwen2 of ``shape`` with the tokenizer of ``tokenizer_dir`` into
    ``directory``; its numbers (for the plan)."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        max_position_embeddings=4096, rope_theta=1e5, rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config).to(getattr(torch, dtype_name))
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    params = sum(p.numel() for p in model.parameters())
    return {"params": params, "vocab": len(tok), "dtype": dtype_name, **asdict(shape)}


def run_logged(
    command: list[str], cwd: Path, env: dict[str, str], timeout_s: float, log: Path
) -> tuple[int, list[str]]:
    """Run ``command``, copying its output to stderr and ``log``; ``(exit status, last lines)``,
    status 124 when it was stopped after ``timeout_s``."""
    tail: collections.deque[str] = collections.deque(maxlen=40)
    with open(log, "a", encoding="utf-8") as sink:
        proc = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            errors="replace", start_new_session=True,
        )  # fmt: skip

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                sink.write(line)
                sink.flush()
                sys.stderr.write(f"  train| {line}")
                tail.append(line.rstrip("\n"))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            status = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            status = 124
        reader.join(timeout=10)
    return status, list(tail)


def kill_group(proc: subprocess.Popen) -> None:
    """Stop ``proc`` and its children (its own session): SIGTERM, then SIGKILL after 10 s."""
    import signal

    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def read_steps(run_dir: Path) -> list[dict[str, Any]]:
    """The step rows of the run's ``metrics.jsonl`` (empty when there is none)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if "time/step" in r]


def why_failed(status: int, tail: list[str], timeout_s: float) -> str:
    """One line: why the run did not finish."""
    if status == 124:
        last = next((ln for ln in reversed(tail) if ln.strip()), "no output")
        return f"did not finish within {timeout_s:g} s (last output: {last.strip()[:200]})"
    said = [
        ln for ln in tail if ln.startswith("codea1") and ("error" in ln.lower() or "sandbox" in ln.lower())
    ]
    last = said[-1] if said else next((ln for ln in reversed(tail) if ln.strip()), "no output")
    return f"exit status {status}: {last.strip()[:300]}"


def planned(command_sets: list[str], model: dict[str, Any], device: str) -> dict[str, Any]:
    """The plan's GiB for the run's configuration and model (``codea1.engine.memory``'s learner
    terms, as ``local_plan`` adds them while the learners compute): each role's fp32 training state,
    the one reference both roles share (they start from one model), and the larger of the worst
    micro-batch's activations (with autocast's bf16 copy and the shared-prompt mask) and the
    transformers ``generate`` rollout: the KV cache of the largest batch at full length in the dtype it
    samples in, with the bf16 copy of the fp32 master weights it samples from
    (``memory.transformers_rollout_bytes``; ``local_plan`` gives this phase to vLLM engines this run
    does not start). The CUDA context is outside torch's allocator."""
    from codea1.config import load_config
    from codea1.engine.memory import (
        LEARNER_OVERHEAD_GIB,
        ModelShape,
        dtype_bytes,
        learner_memory,
        transformers_rollout_bytes,
    )

    cfg = load_config(PRESET, command_sets)
    shape = ModelShape(
        "random-init", layers=model["layers"], hidden=model["hidden"], intermediate=model["intermediate"],
        heads=model["heads"], kv_heads=model["kv_heads"], vocab=model["vocab"], tied=True,
    )  # fmt: skip
    w = dtype_bytes(cfg.engine)
    mems = {r: learner_memory(cfg, r, shape, local=True, weight_bytes=w) for r in ("coder", "tester")}
    terms = {f"{r} fp32 state": m.states_fp32 for r, m in mems.items()}
    terms["reference"] = mems["coder"].reference
    update = max(m.fsdp_buffers + m.activations + getattr(m, "mask", 0.0) for m in mems.values())
    kv_bytes, copy_bytes = transformers_rollout_bytes(cfg, shape)
    kv, generate = kv_bytes / GIB, (kv_bytes + copy_bytes) / GIB
    terms["max(update " + f"{update:.2f}, generate {generate:.2f})"] = max(update, generate)
    return {
        "terms_gib": terms, "update_gib": update, "generate_kv_gib": kv, "generate_copy_gib": copy_bytes / GIB,
        "allocator_gib": sum(terms.values()),
        "context_allowance_gib": LEARNER_OVERHEAD_GIB, "total_gib": gpu_total_gib(device),
        "model_params": shape.params,
    }  # fmt: skip


def gpu_total_gib(device: str) -> float:
    """The memory of the CUDA device (0 on a CPU)."""
    if not device.startswith("cuda"):
        return 0.0
    import torch

    return torch.cuda.get_device_properties(torch.device(device)).total_memory / GIB


def memory_row(steps: list[dict[str, Any]], plan: dict[str, Any] | None, device: str, error: str) -> Row:
    """``train memory vs plan``: each step's allocator peak against the plan."""
    name = "train memory vs plan"
    if error:
        return Row(name, "FAIL", f"plan not computed: {error}", "codea1.engine.memory.local_plan")
    assert plan is not None
    terms = " + ".join(f"{k} {v:.2f}" for k, v in plan["terms_gib"].items())
    how = (
        f"plan (codea1.engine.memory.learner_memory): {terms} = {plan['allocator_gib']:.2f} GiB (the CUDA "
        f"context, allowed {plan['context_allowance_gib']:.1f} GiB, is outside torch's allocator); measured: "
        "memory/peak_gpu_gib (allocated) / memory/peak_gpu_reserved_gib of each step"
    )
    peaks = [(s.get("memory/peak_gpu_gib"), s.get("memory/peak_gpu_reserved_gib")) for s in steps]
    if not steps or any(a is None for a, _ in peaks):
        why = "no step ran" if not steps else "memory/peak_gpu_gib not logged"
        verdict = "N/A" if not device.startswith("cuda") and steps else "FAIL"
        return Row(name, verdict, f"{why} (CUDA only); plan {plan['allocator_gib']:.2f} GiB", how, data=plan)
    measured = ", ".join(f"step {i}: {a:.2f} / {r:.2f}" for i, (a, r) in enumerate(peaks, 1))
    worst = max(a for a, _ in peaks)
    ok = worst <= plan["allocator_gib"]
    value = (
        f"planned {plan['allocator_gib']:.2f} GiB, measured allocated / reserved {measured} GiB "
        f"({100 * worst / plan['allocator_gib']:.0f} % of the plan) on a {plan['total_gib']:.1f} GiB GPU"
    )
    if not ok:
        value += f"; over the plan by {worst - plan['allocator_gib']:.2f} GiB"
    data = plan | {"peak_gpu_gib": [a for a, _ in peaks], "peak_gpu_reserved_gib": [r for _, r in peaks]}
    return Row(name, "PASS" if ok else "FAIL", value, how, data=data)


def train_row(
    title: str, status: int, tail: list[str], steps: list[dict[str, Any]], timeout_s: float, seconds: float
) -> Row:
    """The run's row: PASS when it exited 0 after :data:`STEPS` steps with finite losses."""
    losses = [v for s in steps for k, v in s.items() if k.startswith("loss/") and isinstance(v, float)]
    finite = all(math.isfinite(v) for v in losses) and bool(losses)
    times = ", ".join(f"{s['time/step']:.1f}" for s in steps)
    keys = ("coder/reward_mean", "exec/verdicts", "coder/extract_ok_rate", "tester/valid_tests_mean")
    last = steps[-1] if steps else {}
    seen = ", ".join(f"{k} {last[k]:.3g}" for k in keys if isinstance(last.get(k), float))
    how = f"python -m codea1 train --preset {PRESET} (installed copy), shrunk (benchmarks/gpu_train.py)"
    data = {"status": status, "steps": steps, "tail": tail[-10:]}
    if status != 0 or len(steps) != STEPS or not finite:
        why = (
            why_failed(status, tail, timeout_s) if status else f"{len(steps)} steps, losses finite: {finite}"
        )
        return Row(title, "FAIL", why, how, seconds, data)
    value = f"{len(steps)} steps ({times} s per step); last step: {seen}"
    return Row(title, "PASS", value, how, seconds, data)


def main(argv: list[str] | None = None) -> int:
    """Build the model, run the training, compare memory with the plan, write the rows."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True, help="tokenizer directory (the carried SmolLM2 one)")
    ap.add_argument("--work", required=True, help="work directory (model, run directory, log)")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    ap.add_argument("--tiny", action="store_true", help="the tiny shape and 16-token completions (a CPU)")
    ap.add_argument("--rollout", default="transformers", choices=("transformers", "vllm"))
    ap.add_argument("--backend", default="local", choices=("local", "ray"))
    ap.add_argument("--timeout-s", type=float, default=240.0, help="stop codea1 train after this long")
    ap.add_argument("--result", default="", help="write the rows here (JSON)")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    label = "train (transformers engine)"
    if args.backend == "ray":
        label = "train (Ray backend, vLLM replicas)"
    elif args.rollout == "vllm":
        label = "train (vLLM rollouts)"
    title = f"{label}, {args.device}"
    rows = run_stage(args, work, title)
    for row in rows:
        row.seconds = row.seconds if row.seconds is not None else time.perf_counter() - start
    if args.result:
        Path(args.result).write_text(
            json.dumps([asdict(r) for r in rows], default=str) + "\n", encoding="utf-8"
        )
    for row in rows:
        print(f"{row.name}: {row.verdict}: {row.value}", file=sys.stderr)
    return 1 if any(r.verdict == "FAIL" for r in rows) else 0


def run_stage(args: argparse.Namespace, work: Path, title: str) -> list[Row]:
    """Build, train and compare; every failure is a row, never a traceback."""
    start = time.perf_counter()
    shape = SHAPES["tiny" if args.tiny else "small"]
    dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    model_dir, run_dir = work / "model", work / "run"
    try:
        model = build_model(model_dir, Path(args.tokenizer), shape, dtype)
    except Exception as e:  # a missing tokenizer, a broken install: one line
        return [
            Row(title, "FAIL", f"model not built: {type(e).__name__}: {e}"[:300], "benchmarks/gpu_train.py")
        ]
    print(
        f"gpu_train: random-init Qwen2 {model['params'] / 1e6:.1f} M parameters ({dtype}) in {model_dir}",
        file=sys.stderr,
    )
    command = train_command(
        sys.executable, str(model_dir), str(run_dir), args.device, tiny=args.tiny, rollout=args.rollout,
        backend=args.backend,
    )  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    status, tail = run_logged(command, work, env, args.timeout_s, work / "train.log")
    steps = read_steps(run_dir)
    rows = [train_row(title, status, tail, steps, args.timeout_s, time.perf_counter() - start)]
    sets = overrides(str(model_dir), args.device, tiny=args.tiny, rollout=args.rollout, backend=args.backend)
    if args.backend == "ray":  # the learners are actors: the driver logs no GPU peak
        return rows
    try:
        plan, error = planned(sets, model, args.device), ""
    except Exception as e:
        plan, error = None, f"{type(e).__name__}: {e}"[:300]
    rows.append(memory_row(steps, plan, args.device, error))
    return rows


if __name__ == "__main__":
    sys.exit(main())
