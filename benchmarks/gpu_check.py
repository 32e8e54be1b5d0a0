"""One-GPU check of the engine at the paper-1.5b size: rollout and update speed, memory, FSDP2.

A random-init Qwen2 model with the architecture of Qwen2.5-Coder-1.5B-Instruct (numbers from
``cluster_memory.py``; no weights, no tokenizer, no download) is driven through codea1's own code on
one device with the local backend:

1. **Rollout**: ``HFPolicy.generate`` (transformers ``generate`` with codea1's batching, seeding and
   sampling log-probs; the text side uses a stand-in tokenizer whose text is token ids written as
   numbers), the paper's sampling (T = 1, top-p 1, top-k off) on random prompt ids. Completion
   tokens/s and peak memory.
2. **Update**: ``HFLearner`` over the model with a frozen reference (``FullWeights``), gradient
   checkpointing, the paper-1.5b preset's optimiser and micro-batch, and the project's loss
   (``codea1.core.losses.policy_loss`` bound by ``codea1.scoring.bind_policy_loss``): log-prob
   tokens/s (no grad, as for old and reference log-probs), ``train_step`` tokens/s (the second of two
   steps), peak memory, and the share of weights one step at the preset's lr changes.
3. **FSDP2, world size 1** (nccl on CUDA, gloo on CPU): the same initial weights sharded as the
   Ray backend's learner ranks shard them (``codea1.engine.hf_local.fsdp.shard``: ``fully_shard`` per
   decoder layer, then the learner's scorer as the root, which holds the embedding, the final norm
   and the tied or untied head). One ``train_step`` on the same batch as a one-process
   learner: the loss must be finite, the weights must change, and loss and gradients must equal the
   one-process ones.

Prints a markdown table; writes ``gpu_check.json`` to ``--out`` or ``$OUT`` when set. Exit status 1
when a check fails, 2 on bad input. ``--tiny --device cpu`` runs a tiny model in seconds (CI tests
the script itself that way).

Usage: ``python benchmarks/gpu_check.py [--device cuda] [--tiny] [--out DIR]`` (``scripts/gpu_check.sh``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import resource
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from cluster_memory import MODELS, ModelShape  # benchmarks/, this script's directory

from codea1.config import load_config
from codea1.engine.base import SamplingParams, TrainBatch
from codea1.engine.hf_local.fsdp import shard
from codea1.engine.hf_local.learner import HFLearner
from codea1.engine.hf_local.policy import HFPolicy
from codea1.engine.hf_local.weights import FullWeights, ModuleRollout
from codea1.scoring import bind_policy_loss

PRESET = "paper-1.5b"
TINY = ModelShape("tiny", layers=2, hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=512, tied=True)


@dataclass(frozen=True)
class Sizes:
    """How much work each measurement does."""

    prompts: int
    n: int
    prompt_tokens: int
    new_tokens: int
    update_sequences: int
    response_tokens: int


FULL = Sizes(prompts=32, n=8, prompt_tokens=512, new_tokens=512, update_sequences=64, response_tokens=512)
"""256 rows sampled together (the paper's ``sampling.batch_size``); 64 sequences of 1,024 tokens per update."""
SMALL = Sizes(prompts=2, n=2, prompt_tokens=8, new_tokens=8, update_sequences=4, response_tokens=8)


class TokenIdText:
    """A stand-in tokenizer: text is token ids written as decimal numbers separated by spaces."""

    def __init__(self, vocab: int) -> None:
        self.pad_token_id = 0
        self.eos_token_id = vocab - 1

    def __call__(self, text: str, add_special_tokens: bool = False) -> Any:
        """``.input_ids`` of ``text``."""
        return argparse.Namespace(input_ids=[int(t) for t in text.split()])

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """The ids as text."""
        return " ".join(str(i) for i in ids)


def build_model(shape: ModelShape, device: torch.device, dtype: torch.dtype, seed: int = 0) -> Any:
    """A random-init Qwen2 causal LM with ``shape``'s numbers, on ``device``, with checkpointing on."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=shape.tied,
    )  # fmt: skip
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with device:
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model.eval()


def peak_gib(device: torch.device) -> float:
    """Peak memory since the last reset: CUDA allocator peak, or this process's peak RSS on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def reset_peak(device: torch.device) -> None:
    """Start a new peak-memory window (CUDA only; CPU RSS peaks cannot be reset)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def sync(device: torch.device) -> None:
    """Wait for queued device work so wall-clock times are right."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_ids(count: int, length: int, vocab: int, seed: int) -> list[tuple[int, ...]]:
    """``count`` rows of ``length`` random token ids that avoid pad (0) and the eos id (vocab - 1)."""
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randint(1, vocab - 1, (length,), generator=g).tolist()) for _ in range(count)]


def rollout(model: Any, shape: ModelShape, sizes: Sizes, device: torch.device) -> dict[str, float]:
    """Tokens/s and peak memory of one ``HFPolicy.generate`` call with every row in one batch."""
    policy = HFPolicy(ModuleRollout(model), TokenIdText(shape.vocab), role="coder")
    prompts = [" ".join(map(str, p)) for p in random_ids(sizes.prompts, sizes.prompt_tokens, shape.vocab, 1)]
    rows = sizes.prompts * sizes.n
    params = SamplingParams(
        n=sizes.n,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=sizes.new_tokens,
        seed=0,
        batch_size=rows,
    )
    policy.generate(prompts[:1], SamplingParams(n=2, max_new_tokens=4, seed=0))  # warm-up
    reset_peak(device)
    out = policy.generate(prompts, params)
    sync(device)
    stats = policy.last_stats
    return {
        "rows": float(len(out)),
        "new_tokens": stats["new_tokens"],
        "seconds": stats["seconds"],
        "tokens_per_s": stats["tokens_per_s"],
        "peak_gib": peak_gib(device),
    }


def learner_for(model: Any, keep_reference: bool) -> HFLearner:
    """An ``HFLearner`` as the preset builds it (loss aggregation, log-prob chunk, prompt sharing),
    its optimiser without warm-up (every step at the full lr)."""
    cfg = load_config(PRESET)
    return HFLearner.from_config(
        FullWeights(model, keep_reference=keep_reference),
        dataclasses.replace(cfg.coder.optim, warmup_steps=0),
        100,
        cfg.engine,
        cfg.loss,
        temperature=cfg.coder.sampling.temperature,
        pad_id=0,
    )


def update_batch(shape: ModelShape, sizes: Sizes) -> TrainBatch:
    """Random prompts and responses, advantages of both signs that do not cancel (old/ref log-probs
    filled later)."""
    prompts = random_ids(sizes.update_sequences, sizes.prompt_tokens, shape.vocab, 2)
    responses = random_ids(sizes.update_sequences, sizes.response_tokens, shape.vocab, 3)
    advantages = [1.0 if i % 2 == 0 else -0.5 for i in range(sizes.update_sequences)]
    return TrainBatch(prompts, responses, advantages)


def tokens_of(batch: TrainBatch) -> tuple[int, int]:
    """(all tokens, response tokens) of ``batch``."""
    response = sum(len(c) for c in batch.completion_ids)
    return sum(len(p) for p in batch.prompt_ids) + response, response


def changed_share(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    """Share of tensor elements that differ between two snapshots with the same names."""
    changed = sum(int((before[n] != after[n]).sum()) for n in before)
    return changed / sum(t.numel() for t in before.values())


def cpu_snapshot(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Full (gathered) copies of ``tensors`` on the CPU."""
    return {n: _full(t).detach().to("cpu", copy=True) for n, t in tensors.items()}


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def update(model: Any, shape: ModelShape, sizes: Sizes, device: torch.device) -> dict[str, float]:
    """Log-prob and ``train_step`` tokens/s, peak memory and the share of weights one step changes."""
    learner = learner_for(model, keep_reference=True)
    loss_fn = bind_policy_loss(load_config(PRESET).loss)
    batch = update_batch(shape, sizes)
    all_tokens, response_tokens = tokens_of(batch)
    reset_peak(device)
    start = time.perf_counter()
    batch.old_logprobs = learner.logprobs(batch)
    sync(device)
    logprob_s = time.perf_counter() - start
    batch.ref_logprobs = learner.logprobs(batch, reference=True)
    learner.train_step(batch, loss_fn)  # warm-up step
    before = cpu_snapshot(learner.params)
    sync(device)
    start = time.perf_counter()
    stats = learner.train_step(batch, loss_fn)
    sync(device)
    seconds = time.perf_counter() - start
    return {
        "sequences": float(len(batch)),
        "tokens": float(all_tokens),
        "response_tokens": float(response_tokens),
        "logprob_tokens_per_s": all_tokens / logprob_s,
        "seconds": seconds,
        "tokens_per_s": all_tokens / seconds,
        "response_tokens_per_s": response_tokens / seconds,
        "loss": stats["loss"],
        "grad_norm": stats["grad_norm"],
        "lr": stats["lr"],
        "weights_changed": changed_share(before, cpu_snapshot(learner.params)),
        "peak_gib": peak_gib(device),
    }


def free_port() -> int:
    """A TCP port free on this machine now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def process_group(device: torch.device) -> Iterator[str]:
    """A world-size-1 ``torch.distributed`` group (nccl on CUDA, gloo on CPU); yields the backend."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.distributed.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    try:
        yield backend
    finally:
        torch.distributed.destroy_process_group()


def relative_gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """max |a - b| / max |a| over all tensors (both snapshots on the CPU, same names)."""
    gap = max(float((a[n].float() - b[n].float()).abs().max()) for n in a)
    scale = max(float(a[n].float().abs().max()) for n in a)
    return gap / scale if scale > 0 else gap


def fsdp_check(shape: ModelShape, sizes: Sizes, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """One FSDP2 world-size-1 ``train_step`` against a one-process step from the same weights."""
    loss_fn = bind_policy_loss(load_config(PRESET).loss)
    batch = update_batch(shape, sizes)
    local_model = build_model(shape, device, dtype)
    local = learner_for(local_model, keep_reference=False)
    batch.old_logprobs = local.logprobs(batch)
    batch.ref_logprobs = list(batch.old_logprobs)  # the reference equals the weights before the step
    initial = cpu_snapshot(local.params)
    local_stats = local.train_step(batch, loss_fn)
    local_grads = cpu_snapshot({n: p.grad for n, p in local.params.items()})
    del local, local_model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    with process_group(device) as backend:
        model = build_model(shape, device, dtype)
        shard(model)  # the learner groups' FSDP2 layout (codea1.engine.hf_local.fsdp)
        learner = learner_for(model, keep_reference=False)
        stats = learner.train_step(batch, loss_fn)
        grads = cpu_snapshot({n: p.grad for n, p in learner.params.items()})
        after = cpu_snapshot(learner.params)
    same_names = sorted(grads) == sorted(local_grads)
    return {
        "backend": backend,
        "loss": stats["loss"],
        "grad_norm": stats["grad_norm"],
        "local_loss": local_stats["loss"],
        "local_grad_norm": local_stats["grad_norm"],
        "same_parameter_names": same_names,
        "grad_gap": relative_gap(local_grads, grads) if same_names else float("inf"),
        "weights_changed": changed_share(initial, after) if same_names else 0.0,
    }


def checks(fsdp: dict[str, Any], dtype: torch.dtype) -> dict[str, bool]:
    """Pass/fail of each FSDP2 check; bf16 gets a looser gradient tolerance than fp32."""
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    loss_gap = abs(fsdp["loss"] - fsdp["local_loss"]) / max(1.0, abs(fsdp["local_loss"]))
    return {
        "FSDP2 loss and grad norm finite": math.isfinite(fsdp["loss"]) and math.isfinite(fsdp["grad_norm"]),
        "FSDP2 step changed the weights": fsdp["weights_changed"] > 0,
        "FSDP2 loss = one-process loss": loss_gap <= tol,
        "FSDP2 gradients = one-process gradients": fsdp["same_parameter_names"] and fsdp["grad_gap"] <= tol,
    }


def table(result: dict[str, Any]) -> str:
    """The markdown table of one run."""
    r, u, f, s = result["rollout"], result["update"], result["fsdp"], result["sizes"]
    length = s["prompt_tokens"] + s["response_tokens"]
    mem = "torch.cuda.max_memory_allocated" if result["device"].startswith("cuda") else "process peak RSS"
    rows = [
        ("device", result["device_name"], f"torch {result['torch']}, transformers {result['transformers']}"),
        ("model", f"{result['params']:,} params, {result['dtype']}", f"random init, {result['shape']}"),
        (
            "rollout tokens/s",
            f"{r['tokens_per_s']:.1f}",
            f"codea1 HFPolicy.generate (transformers generate): {int(r['rows'])} rows in one batch, "
            f"{s['prompt_tokens']}-token prompts, <= {s['new_tokens']} new tokens, T=1; "
            f"{int(r['new_tokens'])} tokens in {r['seconds']:.2f} s",
        ),
        ("rollout peak memory GiB", f"{r['peak_gib']:.2f}", mem),
        (
            "log-prob tokens/s (no grad)",
            f"{u['logprob_tokens_per_s']:.1f}",
            f"HFLearner.logprobs over {int(u['sequences'])} sequences of {length} tokens",
        ),
        (
            "update tokens/s",
            f"{u['tokens_per_s']:.1f}",
            f"HFLearner.train_step (2nd step), {int(u['tokens'])} tokens ({u['response_tokens_per_s']:.1f} response "
            f"tokens/s), micro-batch {result['micro_batch_size']}, gradient checkpointing, policy_loss; "
            f"{u['seconds']:.2f} s",
        ),
        ("update peak memory GiB", f"{u['peak_gib']:.2f}", f"{mem}; weights, reference, AdamW, activations"),
        (
            "weights changed by one update",
            f"{100 * u['weights_changed']:.2f} %",
            f"elements of the trainable tensors, lr {u['lr']:.1e}, {result['dtype']}",
        ),
        (
            f"FSDP2 world size 1 ({f['backend']})",
            f"loss {f['loss']:.6g}, grad norm {f['grad_norm']:.6g}",
            f"one process: loss {f['local_loss']:.6g}, grad norm {f['local_grad_norm']:.6g}",
        ),
        (
            "FSDP2 gradient gap",
            f"{f['grad_gap']:.2e}",
            "max abs Δ grad / max abs grad against the one-process step",
        ),
        ("FSDP2 weights changed", f"{100 * f['weights_changed']:.2f} %", "elements, after one train_step"),
    ]
    rows += [(name, "pass" if ok else "FAIL", "check") for name, ok in result["checks"].items()]
    rows.append(("total seconds", f"{result['seconds']:.1f}", "model builds included"))
    lines = ["| measurement | value | how |", "|---|--:|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the three measurements, print the table, write the JSON; 1 if a check fails."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    ap.add_argument("--tiny", action="store_true", help="a tiny model and small sizes (seconds; for CI)")
    ap.add_argument("--out", default=os.environ.get("OUT", ""), help="directory for gpu_check.json ($OUT)")
    args = ap.parse_args(argv)
    try:
        device = torch.device(args.device)
    except RuntimeError:
        device = torch.device("meta")
    if device.type not in ("cuda", "cpu"):
        print(f"gpu_check: --device must be cuda, cuda:N or cpu, got {args.device!r}", file=sys.stderr)
        return 2
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            f"gpu_check: --device {args.device} but torch sees no CUDA device (--device cpu runs on the CPU)",
            file=sys.stderr,
        )
        return 2
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    import transformers

    shape = TINY if args.tiny else MODELS["Qwen/Qwen2.5-Coder-1.5B-Instruct"]
    sizes = SMALL if args.tiny else FULL
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # what engine.dtype auto picks
    start = time.perf_counter()
    model = build_model(shape, device, dtype)
    result: dict[str, Any] = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "shape": shape.name,
        "params": sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()),
        "dtype": str(dtype).removeprefix("torch."),
        "micro_batch_size": load_config(PRESET).coder.optim.micro_batch_size,
        "sizes": dataclasses.asdict(sizes),
    }
    result["rollout"] = rollout(model, shape, sizes, device)
    result["update"] = update(model, shape, sizes, device)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    result["fsdp"] = fsdp_check(shape, sizes, device, dtype)
    result["checks"] = checks(result["fsdp"], dtype)
    result["seconds"] = time.perf_counter() - start
    print(table(result))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_check.json").write_text(
            json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8"
        )
    return 0 if all(result["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
