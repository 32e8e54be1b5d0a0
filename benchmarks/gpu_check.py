"""One-GPU check of the engine: the Ray learner's build, shared-prompt rows, the memory plan, the weight
sync, DCP checkpoints, the caching allocator and LoRA adapters, plus rollout and update speed.

Random-init Qwen2 models built from a config (the architecture numbers of ``cluster_memory.py``; no
weights, no tokenizer, no download) are driven through codea1's own code on one device, with torch,
transformers and peft only (no vLLM, no Ray). Correctness checks use a small shape (4 layers, hidden
512, vocabulary 32,768); memory and cost checks use Qwen2.5-Coder-1.5B's shape ((c): every paper
model's). Each check prints one line with a verdict (PASS, FAIL, N/A where it needs CUDA), some
print detail lines under it; the ``s`` column is its wall time.

* **(a) Ray learner build, world size 1**: ``LearnerWorker.setup`` itself (the body of the Ray
  learner actor, called without Ray; only its model loading is replaced by a random-init model) in
  a one-rank process group, nccl on CUDA (gloo on CPU), with ``paper-1.5b-ray``'s configuration,
  then one ``train_step`` at lr 1e-6. PASS when the parameters are FSDP2 DTensors holding fp32
  master weights, the decoder layers compute in bf16 (a forward hook sees the gathered weights), the
  frozen reference is bf16, more than 90 % of the weights change, and loss and gradients equal an
  fp32 one-process ``HFLearner`` step from the same weights and batch within the bf16 tolerance:
  ``|Δ loss| <= 1e-2 × max(1, |loss|)`` and ``||Δ grad|| / ||grad|| <= 5e-2`` over all tensors
  (bf16's unit roundoff is 2⁻⁸ = 3.9e-3; a missing reduction, a wrong scale or a wrong layout is
  O(1)). On CPU everything is fp32 and the tolerance is 1e-5.
* **(b) shared-prompt rows**: the local learner (fp32 master weights, bf16 autocast on CUDA) scores
  and steps one prompt with 8 samples, once with shared-prompt rows and once with one row per
  sequence, at a typical row (1,024-token prompt + 8 × 512) and a worst-case one (4,096 + 8 ×
  4,096: the 8,192-token row cap splits the 36,864-token row until sharing no longer pays), cut by
  the presets' 32,768-token budget; lr 0, so both layouts see the same weights. Time and peak
  memory of each layout's log-prob pass and step. PASS when the typical row is shared, the cap
  bounds the worst one, log-probs agree within 0.1 nats and gradients within 5e-2 relative L2
  (bf16; 1e-4 in fp32 on CPU) and, on CUDA, the shared layout peaks at most 1.05 × the other.
* **(c) micro-batch memory vs the plan**: for each ``paper-*`` preset (local and Ray), its learner
  built as that backend builds it (the local ``HFLearner``, fp32 masters and autocast; the Ray rank
  through ``LearnerWorker.setup``) at world size 1 and without reference runs forward and backward
  of the largest micro-batch each role's ``micro_batch_tokens`` admits with full-length completions
  (coder 4 × (4,096 + 4,096), tester 3 × (6,826 + 4,096)), after a warm-up pass that allocated the
  gradients. Measured: the allocator's peak above what was allocated before (activations, compute
  copies); predicted: ``codea1.engine.memory.learner_memory``'s activations plus FSDP2 buffers (Ray)
  or autocast copy (local), the terms ``cluster_memory.py`` prints. PASS when measured <= predicted
  for both roles of every preset that fits the GPU. The training state is not measured (a 7B rank's
  fp32 state is meant for 4 GPUs); the dtype of the layers' inputs (what the checkpoints hold) is
  shown. A preset whose world-size-1 learner would not fit the GPU by the plan (fp32 weights and
  gradients, the worst micro-batch, the allowance, over the GPU less 5 %: ``paper-7b`` and
  ``paper-7b-ray`` on an 80 GB H100, about 107 and 92 GiB) is an N/A row saying so, never built
  (``--gpu-gib`` plans another size). N/A on CPU and with ``--tiny``, where the same passes run at
  1/256 of the lengths.
* **(d) weight sync**: at the 1.5B shape on a Ray rank, the rank side of a sync timed in its parts
  (cast the fp32 shards to bf16, gather each tensor whole, copy to the CPU), then whole as the learner
  does it (``sharded_state.full_tensors(params, bf16)``), then ``LearnerWorker.named_weights``, and,
  on CUDA, a copy into one pinned buffer for comparison; seconds and bytes. PASS when the synced
  tensors are bf16, on the CPU, 2 bytes per parameter and equal to the masters cast to bf16. At
  world size 1 the gather is a local copy; with N ranks each tensor is all-gathered.
* **(e) DCP round trip**: a Ray rank steps, saves (``learner.save``: whole fp32 weights in
  safetensors, the optimizer state sharded with ``torch.distributed.checkpoint``, the scheduler),
  and steps again; a rank built from other initial weights in a new process group loads the
  checkpoint and takes the same step. PASS when weights, AdamW moments and steps and the schedule
  are restored bit for bit and the next step's loss, gradient norm and weights are identical
  (deterministic algorithms and math attention; ops without a deterministic version are listed).
* **(f) caching allocator after a step**: a full 1.5B Ray rank (fp32 masters, bf16 reference, AdamW)
  takes one step; ``torch.cuda.memory_allocated``, ``memory_reserved`` and ``mem_get_info`` are read
  at the optimizer step and after ``train_step``, which frees the gradients and empties the cache.
  PASS when reserved − allocated after ``train_step`` is at most 1 GiB; also shown: what the device
  holds outside the allocator, against the plan's 1.5 GiB allowance. N/A on CPU (the step runs).
* **(g) adapters under FSDP2**: a Ray rank in ``engine.mode: adapters`` (LoRA adapters ``coder`` and
  ``tester`` on one frozen base, via peft) at world size 1 takes one step as the coder. PASS when
  the trainable tensors are exactly the coder adapter's (fp32, sharded), some of them change, and
  every base and tester-adapter tensor is unchanged bit for bit.
* **rollout / update speed** (info): ``HFPolicy.generate`` tokens/s (256 rows of 512-token prompts,
  512 new tokens) and the local ``HFLearner``'s log-prob and ``train_step`` tokens/s (8 prompts × 8
  samples of 512 + 512 tokens, shared rows, the preset's budget) at the 1.5B shape, peak memory.

A check that raises prints FAIL with a one-line reason (the traceback goes to stderr), and the
others still run. No check (nor a preset of (c)) starts once ``--budget-s`` (440 s) has passed: it
prints FAIL, "not run". Rows are printed as checks end, so a run stopped by the time limit keeps
them, and ``gpu_check.json`` (every number) is rewritten after each check under ``--out`` or
``$OUT``. Exit status 1 when a line says FAIL, 2 on bad input.

Estimated time on one H200 (FLOP counts at 30-40 % of the bf16 peak, a few seconds per model
build; the ``s`` column has the real ones): start and CUDA init 15 s, (a) 10 s, (b) 20 s, (d) 12 s,
(e) 10 s, (f) 8 s, (g) 5 s, (c) 90 s (1.5B, 3B and 7B, each built twice, two 32k-token passes
each), rollout 22 s, update 12 s: about 3.5 minutes; on an 80 GB H100 the 7B presets of (c) are
not built (N/A by the plan), which leaves about 3 minutes, within the 230 s that
``scripts/gpu_check.sh --call 2`` gives them. The budget decides: a check not started in time is a
FAIL "not run". They run in that order, the long (c) and the speed rows last.

On a lent GPU: ``scripts/gpu_check.sh``, whose last stage this is (``benchmarks/gpu_stages.py``
runs it with the time the earlier stages left; ``--stages engine --only a,e`` reruns some,
``--tiny`` makes the models tiny). Elsewhere:
``python benchmarks/gpu_check.py [--device cuda|cuda:N|cpu] [--tiny] [--only a,b] [--out DIR]``;
``--tiny --device cpu`` runs every check with a tiny model in about a minute on 2 cores (the tests).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import gc
import json
import math
import os
import resource
import socket
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from cluster_memory import MODELS  # benchmarks/, this script's directory
from torch.nn.attention import SDPBackend, sdpa_kernel

from codea1.config import RunConfig, load_config
from codea1.core.losses import LossNormalizer
from codea1.engine.base import SamplingParams, TrainBatch
from codea1.engine.hf_local.fsdp import decoder_layers
from codea1.engine.hf_local.learner import HFLearner, micro_batches
from codea1.engine.hf_local.logprobs import (
    MAX_MASK_ELEMENTS,
    MAX_SHARED_ROW_TOKENS,
    shared_rows,
    sharing_pays,
)
from codea1.engine.hf_local.policy import HFPolicy
from codea1.engine.hf_local.sharded_state import full_tensors, is_sharded
from codea1.engine.hf_local.weights import FullWeights, ModuleRollout
from codea1.engine.loading import pick_device, pick_dtype
from codea1.engine.memory import GIB, HEADROOM_FRACTION, LEARNER_OVERHEAD_GIB, ModelShape, learner_memory
from codea1.engine.ray_cluster import learner_worker
from codea1.scoring import bind_policy_loss

LOCAL_PRESET = "paper-1.5b"
RAY_PRESET = "paper-1.5b-ray"
PAPER_PRESETS = ("paper-1.5b", "paper-1.5b-ray", "paper-3b", "paper-3b-ray", "paper-7b", "paper-7b-ray")
MODEL_1_5B = MODELS["Qwen/Qwen2.5-Coder-1.5B-Instruct"]
SMALL = ModelShape(
    "small", layers=4, hidden=512, intermediate=1408, heads=8, kv_heads=2, vocab=32768, tied=True
)
TINY = ModelShape("tiny", layers=2, hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=512, tied=True)
TOTAL_STEPS = 100
CPU_SCALE = 256
"""On a CPU or with ``--tiny``, (c) runs at 1/``CPU_SCALE`` of the presets' lengths and token budgets."""
BUDGET_S = 440.0
"""No check starts later than this after the start (``scripts/gpu_check.sh`` stops the run at 480 s)."""

BF16_LOSS_TOL, BF16_GRAD_TOL = 1e-2, 5e-2
"""(a): loss gap relative to max(1, |loss|), gradient gap as ||Δ|| / ||grad||, with bf16 compute."""
FP32_TOL = 1e-5
"""(a) with fp32 compute (CPU)."""
SHARED_LOGPROB_TOL, SHARED_GRAD_TOL = 0.1, 5e-2
"""(b) with bf16 autocast: max |Δ log-prob| in nats, gradient ||Δ|| / ||grad||."""
SHARED_FP32_TOL = 1e-4
"""(b) in fp32 (CPU)."""
UNALLOCATED_GIB = 1.0
"""(f): the most the caching allocator may keep reserved beyond what is allocated after a step."""


@dataclass(frozen=True)
class Sizes:
    """How much work the checks do: ``(prompts, samples, prompt tokens, completion lengths)``
    batches, (b)'s rows as ``(prompt tokens, samples, completion tokens)`` and its row cap and
    token budget, and the speed measurements."""

    correctness: tuple[int, int, int, tuple[int, ...]]
    """(a), (e), (g): prompts, samples per prompt, prompt tokens, completion lengths."""
    allocator: tuple[int, int, int, tuple[int, ...]]
    typical_row: tuple[int, int, int]
    worst_row: tuple[int, int, int]
    row_cap: int
    row_budget: int
    """(b)'s token budget per micro-batch (0: the preset's ``micro_batch_tokens``)."""
    rollout_prompts: int
    rollout_n: int
    rollout_prompt_tokens: int
    rollout_new_tokens: int
    update: tuple[int, int, int, tuple[int, ...]]


FULL = Sizes(
    correctness=(4, 4, 256, (64, 128, 192, 256)),
    allocator=(2, 8, 1024, (512,)),
    typical_row=(1024, 8, 512),
    worst_row=(4096, 8, 4096),
    row_cap=MAX_SHARED_ROW_TOKENS,
    row_budget=0,
    rollout_prompts=32,
    rollout_n=8,
    rollout_prompt_tokens=512,
    rollout_new_tokens=512,
    update=(8, 8, 512, (512,)),
)
"""256 rows sampled together (the paper's ``sampling.batch_size``); 64 sequences of 1,024 tokens per update."""
TINY_SIZES = Sizes(
    correctness=(2, 2, 8, (4, 8)),
    allocator=(2, 2, 8, (8,)),
    typical_row=(32, 8, 16),
    worst_row=(128, 8, 128),
    row_cap=256,
    row_budget=1024,
    rollout_prompts=2,
    rollout_n=2,
    rollout_prompt_tokens=8,
    rollout_new_tokens=8,
    update=(2, 2, 8, (8,)),
)
"""The same structure at a tiny scale: (b)'s cap splits the worst row and its budget cuts it in two."""


@dataclass
class Run:
    """One run of the checks: the device, the scale, the clock."""

    device: torch.device
    tiny: bool
    budget_s: float
    simulate_failure: str = ""
    gpu_gib: float = 0.0
    """The GPU's memory for (c)'s fit (0: the device's own)."""
    started: float = field(default_factory=time.perf_counter)

    @property
    def cuda(self) -> bool:
        """Whether the checks run on a CUDA device."""
        return self.device.type == "cuda"

    @property
    def sizes(self) -> Sizes:
        """The sizes of this scale."""
        return TINY_SIZES if self.tiny else FULL

    @property
    def small(self) -> ModelShape:
        """The shape of the correctness checks."""
        return TINY if self.tiny or not self.cuda else SMALL

    @property
    def big(self) -> ModelShape:
        """The shape of the memory and cost checks (the 1.5B's)."""
        return TINY if self.tiny or not self.cuda else MODEL_1_5B

    def device_gib(self) -> float:
        """The GPU's memory in GiB (``--gpu-gib`` where given)."""
        if self.gpu_gib:
            return self.gpu_gib
        return torch.cuda.get_device_properties(self.device).total_memory / GIB

    def model_of(self, cfg: RunConfig) -> ModelShape:
        """The shape of a preset's model (tiny on CPU or with ``--tiny``)."""
        return TINY if self.tiny or not self.cuda else MODELS[cfg.engine.coder_model]

    def left(self) -> float:
        """Seconds left before no further check may start."""
        return self.budget_s - (time.perf_counter() - self.started)


@dataclass
class Row:
    """One line of the table."""

    name: str
    verdict: str
    value: str
    how: str
    seconds: float | None = None
    data: dict[str, Any] = field(default_factory=dict)
    """Numbers for the JSON (not printed)."""


@dataclass
class Outcome:
    """What a check found: its verdict line, detail lines and numbers (for the JSON)."""

    verdict: str
    value: str
    how: str
    details: list[Row] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


# ---- models, configurations, learners -----------------------------------------------------------


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


def build_model(
    shape: ModelShape, device: torch.device, dtype: torch.dtype, seed: int = 0, checkpointing: bool = True
) -> Any:
    """A random-init Qwen2 causal LM with ``shape``'s numbers on ``device`` (eval mode), the same
    weights for the same seed, shape, dtype and device."""
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
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model.eval()


def preset_config(run: Run, preset: str, overrides: Sequence[str] = ()) -> RunConfig:
    """``preset`` on this run's device: CUDA with one GPU per Ray rank and the preset's dtype (auto:
    bf16), or the CPU in fp32 with gloo ranks."""
    if run.cuda:
        device = ["engine.device=cuda", "cluster.gpus_per_worker=1"]
    else:
        device = ["engine.device=cpu", "engine.dtype=float32", "cluster.gpus_per_worker=0"]
    return load_config(preset, [*device, *overrides])


def scaled_lengths(preset: str, factor: int) -> list[str]:
    """Overrides that divide ``preset``'s prompt and completion lengths and token budgets by ``factor``."""
    cfg = load_config(preset)
    out = []
    for role in ("coder", "tester"):
        part = getattr(cfg, role)
        out += [
            f"{role}.sampling.max_prompt_tokens={max(1, part.sampling.max_prompt_tokens // factor)}",
            f"{role}.sampling.max_new_tokens={max(1, part.sampling.max_new_tokens // factor)}",
            f"{role}.optim.micro_batch_tokens={max(0, part.optim.micro_batch_tokens // factor)}",
        ]
    return out


def local_learner(model: Any, cfg: RunConfig, optim: Any = None, keep_reference: bool = False) -> HFLearner:
    """The local backend's learner over ``model`` (fp32 master weights and bf16 autocast when the
    configuration's dtype is bf16 on CUDA), the coder's optimiser without warm-up by default."""
    return HFLearner.from_config(
        FullWeights(model, keep_reference=keep_reference),
        optim or dataclasses.replace(cfg.coder.optim, warmup_steps=0),
        TOTAL_STEPS,
        cfg.engine,
        cfg.loss,
        temperature=cfg.coder.sampling.temperature,
        pad_id=0,
    )


def free_port() -> int:
    """A TCP port free on this machine now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def ray_rank(
    cfg: RunConfig, shape: ModelShape, role: str = "coder", optim: Any = None, seed: int = 0
) -> Iterator[learner_worker.LearnerWorker]:
    """The Ray backend's learner rank, built by ``LearnerWorker.setup`` as the actor builds it, in a
    one-rank process group of its own (nccl on CUDA, gloo on CPU), over a random-init model of
    ``shape`` instead of the files the configuration names (the structure on the meta device, the
    weights rank 0 broadcasts built on the device); closed (group destroyed) on exit."""
    worker = learner_worker.LearnerWorker(copy.deepcopy(cfg), role, rank=0, world=1, shared=False)

    def structure(engine: Any, spec: str) -> tuple[Any, Any]:  # sharded_load.empty_model's part
        dtype = pick_dtype(engine.dtype, pick_device(engine.device))
        model = build_model(shape, torch.device("meta"), dtype, seed, engine.gradient_checkpointing)
        return model, TokenIdText(shape.vocab)

    def weights(engine: Any, spec: str) -> Any:  # sharded_load.full_weights': rank 0's whole copy
        device = pick_device(engine.device)  # built on the device: a 7B model in seconds, not minutes
        return build_model(shape, device, pick_dtype(engine.dtype, device), seed, checkpointing=False)

    originals = (learner_worker.empty_model, learner_worker.full_weights)
    try:
        learner_worker.empty_model, learner_worker.full_weights = structure, weights
        try:
            worker.setup(
                ("127.0.0.1", free_port()),
                optim or dataclasses.replace(getattr(cfg, role).optim, warmup_steps=0),
                TOTAL_STEPS,
            )
        finally:
            learner_worker.empty_model, learner_worker.full_weights = originals
        yield worker
    finally:
        worker.close()


def learner_of(worker: learner_worker.LearnerWorker) -> HFLearner:
    """The rank's learner (set by ``setup``)."""
    if worker.learner is None:
        raise RuntimeError("LearnerWorker.setup did not create a learner")
    return worker.learner


# ---- batches, snapshots, comparisons -------------------------------------------------------------


def random_ids(count: int, length: int, vocab: int, seed: int) -> list[tuple[int, ...]]:
    """``count`` rows of ``length`` random token ids that avoid pad (0) and the eos id (vocab - 1)."""
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randint(1, vocab - 1, (length,), generator=g).tolist()) for _ in range(count)]


def advantages_for(count: int) -> list[float]:
    """Advantages of both signs whose token-mean loss does not cancel to 0."""
    return [(1.0, -0.3, 0.6, -0.8)[i % 4] for i in range(count)]


def grouped_batch(
    vocab: int, prompts: int, n: int, prompt_tokens: int, lengths: Sequence[int], seed: int
) -> TrainBatch:
    """``prompts`` random prompts with ``n`` random completions each (prompt-major, as the trainer
    orders them), completion lengths cycling through ``lengths`` (:func:`advantages_for`)."""
    heads = random_ids(prompts, prompt_tokens, vocab, seed)
    g = torch.Generator().manual_seed(seed + 1)
    prompt_ids, completions = [], []
    for i in range(prompts * n):
        prompt_ids.append(heads[i // n])
        length = lengths[i % len(lengths)]
        completions.append(tuple(torch.randint(1, vocab - 1, (length,), generator=g).tolist()))
    return TrainBatch(prompt_ids, completions, advantages_for(prompts * n))


def distinct_batch(
    vocab: int, rows: int, prompt_tokens: int, completion_tokens: int, seed: int
) -> TrainBatch:
    """``rows`` sequences with prompts of their own (nothing to share) at the given lengths."""
    prompts = random_ids(rows, prompt_tokens, vocab, seed)
    completions = random_ids(rows, completion_tokens, vocab, seed + 1)
    return TrainBatch(prompts, completions, advantages_for(rows))


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def snapshot(tensors: dict[str, torch.Tensor], device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Whole (gathered), detached copies of ``tensors`` on ``device``."""
    return {n: _full(t).detach().to(device, copy=True) for n, t in tensors.items()}


def identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Same names, shapes, dtypes and bits."""
    return a.keys() == b.keys() and all(a[n].dtype == b[n].dtype and torch.equal(a[n], b[n]) for n in a)


def changed_share(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    """Share of tensor elements that differ between two snapshots with the same names."""
    changed = sum(int((before[n] != after[n]).sum()) for n in before)
    return changed / max(1, sum(t.numel() for t in before.values()))


def relative_l2(test: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> float:
    """``||test - ref|| / ||ref||`` over all tensors together (same names)."""
    gap = sum(float((test[n].double() - ref[n].double()).pow(2).sum()) for n in ref)
    norm = sum(float(ref[n].double().pow(2).sum()) for n in ref)
    return math.sqrt(gap / norm) if norm > 0 else math.sqrt(gap)


def max_relative(test: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> float:
    """``max |test - ref| / max |ref|`` over all tensors (same names)."""
    gap = max(float((test[n].float() - ref[n].float()).abs().max()) for n in ref)
    scale = max(float(ref[n].float().abs().max()) for n in ref)
    return gap / scale if scale > 0 else gap


def logprob_gap(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> float:
    """max |a - b| over per-token log-probs of the same sequences."""
    if [len(r) for r in a] != [len(r) for r in b]:
        return math.inf
    return max(
        (abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True)), default=0.0
    )


def dtypes(tensors: Iterable[torch.Tensor]) -> str:
    """The dtypes of ``tensors``, e.g. ``float32`` or ``bfloat16+float32``."""
    return "+".join(sorted({str(t.dtype).removeprefix("torch.") for t in tensors}))


# ---- memory and time ----------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    """Wait for queued device work so wall-clock times are right."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    """Start a new peak-memory window (CUDA only; CPU RSS peaks cannot be reset)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def allocated(device: torch.device) -> int:
    """Bytes the CUDA allocator has handed out (0 on CPU)."""
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def peak_above(device: torch.device, base: int) -> float:
    """GiB of the allocator's peak since :func:`reset_peak` above ``base`` bytes (NaN on CPU)."""
    if device.type != "cuda":
        return math.nan
    return (torch.cuda.max_memory_allocated(device) - base) / GIB


def peak_gib(device: torch.device) -> float:
    """Peak memory since the last reset: CUDA allocator peak, or this process's peak RSS on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / GIB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def release(device: torch.device) -> None:
    """Free what the last check left: garbage, the CUDA cache, a process group left open."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def gib_text(value: float) -> str:
    """``, N.NN GiB``, or nothing for NaN (no allocator peak on a CPU)."""
    return "" if math.isnan(value) else f", {value:.2f} GiB"


@dataclass
class Step:
    """One ``train_step``: its stats, the gradients AdamW stepped with (when asked for) and, on
    CUDA, the allocator at the optimizer step (GiB): the peak since the step began, allocated and
    reserved."""

    stats: dict[str, float]
    grads: dict[str, torch.Tensor]
    peak_gib: float = math.nan
    allocated_gib: float = math.nan
    reserved_gib: float = math.nan


def step_with_grads(
    learner: HFLearner, batch: TrainBatch, loss_fn: Any, grads_to: str | torch.device | None = "cpu"
) -> Step:
    """One ``train_step``, with the gradients AdamW stepped with copied to ``grads_to`` (None: not
    copied). ``train_step`` frees them before it returns, so they are read in an optimizer step
    pre-hook, which sees them clipped; the allocator is read there first, before any copy."""
    out = Step({}, {})
    device = next(iter(learner.params.values())).device

    def read(*_: Any) -> None:
        if device.type == "cuda":
            out.peak_gib = torch.cuda.max_memory_allocated(device) / GIB
            out.allocated_gib = torch.cuda.memory_allocated(device) / GIB
            out.reserved_gib = torch.cuda.memory_reserved(device) / GIB
        if grads_to is not None:
            out.grads = snapshot({n: p.grad for n, p in learner.params.items()}, grads_to)

    hook = learner.optimizer.register_step_pre_hook(read)
    try:
        out.stats = learner.train_step(batch, loss_fn)
    finally:
        hook.remove()
    return out


def verdict(conditions: dict[str, bool]) -> tuple[str, str]:
    """PASS when every condition holds, else FAIL and the ones that do not."""
    failed = [name for name, ok in conditions.items() if not ok]
    return ("PASS", "") if not failed else ("FAIL", "failed: " + "; ".join(failed))


def with_reason(value: str, reason: str) -> str:
    """``value``, then the reason of a failure when there is one."""
    return f"{reason}. {value}" if reason else value


# ---- (a) the Ray learner's build ----------------------------------------------------------------


def check_ray_build(run: Run) -> Outcome:
    """(a): ``LearnerWorker.setup`` at world size 1 against an fp32 one-process step."""
    shape = run.small
    cfg = preset_config(run, RAY_PRESET)
    loss_fn = bind_policy_loss(cfg.loss)
    prompts, n, prompt_tokens, lengths = run.sizes.correctness
    batch = grouped_batch(shape.vocab, prompts, n, prompt_tokens, lengths, seed=2)
    fp32 = preset_config(run, RAY_PRESET, ["engine.dtype=float32"])
    local = local_learner(build_model(shape, run.device, torch.float32), fp32, keep_reference=True)
    batch.old_logprobs = local.logprobs(batch)
    batch.ref_logprobs = local.logprobs(batch, reference=True)
    initial = snapshot(local.params)
    reference_step = step_with_grads(local, batch, loss_fn)
    del local
    release(run.device)
    compute = torch.bfloat16 if run.cuda else torch.float32
    seen: set[str] = set()
    with ray_rank(cfg, shape) as worker:
        learner = learner_of(worker)
        backend = str(torch.distributed.get_backend())
        sharded = all(is_sharded(p) for p in learner.params.values())
        masters = dtypes(learner.params.values())
        reference = dtypes(learner.weights.reference.parameters())
        layer = decoder_layers(learner.weights.train_model())[0]
        linear = next(m for m in layer.modules() if isinstance(m, torch.nn.Linear))
        hook = linear.register_forward_pre_hook(lambda m, args: seen.add(str(m.weight.dtype)))
        before = snapshot(learner.params)
        step = step_with_grads(learner, batch, loss_fn)
        hook.remove()
        after = snapshot(learner.params)
    same_names = step.grads.keys() == reference_step.grads.keys()
    grad_gap = relative_l2(step.grads, reference_step.grads) if same_names else math.inf
    loss, loss_ref = step.stats["loss"], reference_step.stats["loss"]
    loss_gap = abs(loss - loss_ref) / max(1.0, abs(loss_ref))
    loss_tol, grad_tol = (BF16_LOSS_TOL, BF16_GRAD_TOL) if run.cuda else (FP32_TOL, FP32_TOL)
    share = changed_share(before, after)
    want_backend = "nccl" if run.cuda else "gloo"
    compute_name = str(compute).removeprefix("torch.")
    ok, reason = verdict(
        {
            f"{want_backend} group": backend == want_backend,
            "parameters sharded (DTensor)": sharded,
            "fp32 master weights": masters == "float32",
            f"{compute_name} compute": seen == {str(compute)},
            f"{compute_name} reference": reference == compute_name,
            "same initial weights as the one-process model": identical(initial, before),
            "more than 90 % of the weights changed": share > 0.9,
            f"loss within {loss_tol:g}": math.isfinite(loss) and loss_gap <= loss_tol,
            f"gradients within {grad_tol:g}": grad_gap <= grad_tol,
        }
    )
    value = (
        f"loss {loss:.6g} vs {loss_ref:.6g} fp32 one-process (gap {loss_gap:.1e}); gradients ||Δ||/||g|| "
        f"{grad_gap:.2e} (max-abs {max_relative(step.grads, reference_step.grads) if same_names else math.inf:.1e}); "
        f"{100 * share:.2f} % of weights changed at lr {step.stats['lr']:.0e}"
    )
    how = (
        f"LearnerWorker.setup ({RAY_PRESET}) over {backend}, {shape.name} shape; masters {masters}, layers "
        f"compute in {'+'.join(sorted(seen)).replace('torch.', '') or '?'}, reference {reference}; tolerance: "
        f"loss {loss_tol:g} × max(1, |loss|), gradients {grad_tol:g}"
    )
    data = {"loss": loss, "loss_fp32": loss_ref, "loss_gap": loss_gap, "grad_gap": grad_gap, "changed": share}
    data |= {"backend": backend, "masters": masters, "compute": sorted(seen), "reference": reference}
    return Outcome(ok, with_reason(value, reason), how, data=data)


# ---- (b) shared-prompt rows ---------------------------------------------------------------------


def layout(batch: TrainBatch, share: bool, cap: int) -> tuple[str, bool, int]:
    """How ``pack`` lays out ``batch`` as one micro-batch: text, whether prompts are shared, and the
    widest row."""
    prompt_lengths = [len(p) for p in batch.prompt_ids]
    comp_lengths = [len(c) for c in batch.completion_ids]
    if share:
        rows = shared_rows(batch.prompt_ids, comp_lengths, cap)
        if sharing_pays(rows, prompt_lengths, comp_lengths, MAX_MASK_ELEMENTS):
            width = max(prompt_lengths[r[0]] + sum(comp_lengths[i] for i in r) for r in rows)
            return f"{len(rows)} shared × {width:,}", True, width
    longest = max(p + c for p, c in zip(prompt_lengths, comp_lengths, strict=True))
    return f"{len(batch)} × {longest:,}", False, longest


def check_shared_rows(run: Run) -> Outcome:
    """(b): shared-prompt rows against one row per sequence, log-probs, gradients, time, memory."""
    sizes, shape = run.sizes, run.big
    cfg = preset_config(run, LOCAL_PRESET, ["loss.kl_coef=0"])
    budget = sizes.row_budget or cfg.coder.optim.micro_batch_tokens
    optim = dataclasses.replace(
        cfg.coder.optim, lr=0.0, warmup_steps=0, grad_clip=0.0, micro_batch_tokens=budget
    )  # lr 0: both layouts see the same weights
    loss_fn = bind_policy_loss(cfg.loss)
    model = build_model(shape, run.device, pick_dtype(cfg.engine.dtype, run.device))
    learner = local_learner(model, cfg, optim)
    learner.max_row_tokens = sizes.row_cap
    learner.train_step(grouped_batch(shape.vocab, 1, 2, 8, (8,), seed=5), loss_fn)  # AdamW's state
    lp_tol, grad_tol = (
        (SHARED_LOGPROB_TOL, SHARED_GRAD_TOL) if run.cuda else (SHARED_FP32_TOL, SHARED_FP32_TOL)
    )
    details: list[Row] = []
    conditions: dict[str, bool] = {}
    data: dict[str, Any] = {}
    for case, (prompt_tokens, n, completion_tokens) in (
        ("typical", sizes.typical_row),
        ("worst", sizes.worst_row),
    ):
        batch = grouped_batch(shape.vocab, 1, n, prompt_tokens, (completion_tokens,), seed=6)
        lengths = [len(p) + len(c) for p, c in zip(batch.prompt_ids, batch.completion_ids, strict=True)]
        cuts = micro_batches(lengths, optim)
        part = batch.slice(cuts[0].start, cuts[0].stop)
        measured: dict[bool, dict[str, Any]] = {}
        for share in (True, False):
            learner.share_prompts = share
            release(run.device)
            reset_peak(run.device)
            base = allocated(run.device)
            start = time.perf_counter()
            logprobs = learner.logprobs(batch)
            sync(run.device)
            lp_s = time.perf_counter() - start
            lp_peak = peak_above(run.device, base)
            reset_peak(run.device)
            start = time.perf_counter()
            step = step_with_grads(learner, batch, loss_fn, grads_to=run.device)
            sync(run.device)
            text, shared, width = layout(part, share, sizes.row_cap)
            measured[share] = {
                "layout": f"{len(cuts)} × [{text}]", "shared": shared, "width": width, "logprobs": logprobs,
                "logprob_s": lp_s, "logprob_peak_gib": lp_peak, "step_s": time.perf_counter() - start,
                "step_peak_gib": step.peak_gib - base / GIB, "grads": step.grads,
            }  # fmt: skip
        on, off = measured[True], measured[False]
        lp_gap = logprob_gap(on["logprobs"], off["logprobs"])
        grad_gap = relative_l2(on["grads"], off["grads"])
        del on["grads"], off["grads"], on["logprobs"], off["logprobs"]
        whole_row = prompt_tokens + n * completion_tokens
        case_conditions = {
            f"{case}: log-probs within {lp_tol:g}": lp_gap <= lp_tol,
            f"{case}: gradients within {grad_tol:g}": grad_gap <= grad_tol,
        }
        if case == "typical":
            case_conditions[f"{case}: prompt shared"] = on["shared"]
        else:
            case_conditions[f"{case}: row cap {sizes.row_cap:,} bounds the {whole_row:,}-token row"] = (
                whole_row > sizes.row_cap and on["width"] <= sizes.row_cap
            )
        if run.cuda:
            case_conditions[f"{case}: shared peak <= 1.05 × per-sequence peak"] = (
                on["step_peak_gib"] <= 1.05 * off["step_peak_gib"]
            )
        ok, reason = verdict(case_conditions)
        conditions |= case_conditions
        value = "; ".join(
            f"{label} {m['layout']}: log-probs {m['logprob_s']:.2f} s{gib_text(m['logprob_peak_gib'])}, "
            f"step {m['step_s']:.2f} s{gib_text(m['step_peak_gib'])}"
            for label, m in (("shared", on), ("per sequence", off))
        )
        value += f"; max |Δ log-prob| {lp_gap:.2e}, gradients ||Δ||/||g|| {grad_gap:.2e}"
        how = (
            f"{prompt_tokens:,}-token prompt + {n} × {completion_tokens:,}, budget {budget:,} "
            f"tokens, row cap {sizes.row_cap:,}; layout: micro-batches × [rows × positions]; peak: the "
            "allocator's above the resident state"
        )
        details.append(Row(f"(b) {case} row", ok, with_reason(value, reason), how))
        data[case] = {
            **{f"shared_{k}": v for k, v in on.items()},
            **{f"per_sequence_{k}": v for k, v in off.items()},
        }
        data[case] |= {"logprob_gap": lp_gap, "grad_gap": grad_gap}
    ok, reason = verdict(conditions)
    memory = "" if run.cuda else "; memory n/a on CPU"
    value = with_reason(f"typical and worst rows agree (details below){memory}", reason)
    how = (
        f"local HFLearner, {shape.name} shape, {'fp32 masters + bf16 autocast' if run.cuda else 'fp32'}, lr 0; "
        f"tolerance: log-probs {lp_tol:g}, gradients {grad_tol:g}"
    )
    return Outcome(ok, value, how, details, data)


# ---- (c) micro-batch memory against the plan ----------------------------------------------------


def worst_micro_batch(cfg: RunConfig, role: str) -> tuple[int, int, int]:
    """``(rows, prompt tokens, completion tokens)`` of the largest micro-batch ``role``'s token
    budget admits with full-length completions: as many full-length rows as fit, or one more row
    with a shorter prompt when that fills more of the budget."""
    sampling, optim = getattr(cfg, role).sampling, getattr(cfg, role).optim
    prompt, new = sampling.max_prompt_tokens, sampling.max_new_tokens
    budget = optim.micro_batch_tokens
    if budget <= 0:
        return optim.micro_batch_size, prompt, new
    longest = prompt + new
    if longest >= budget:
        return 1, prompt, new
    rows = budget // longest
    shorter = budget // (rows + 1)
    if rows * longest < (rows + 1) * shorter and shorter > new:
        return rows + 1, shorter - new, new
    return rows, prompt, new


def micro_pass(learner: HFLearner, batch: TrainBatch, loss_fn: Any) -> None:
    """Forward and backward of ``batch`` as one micro-batch of ``train_step`` (the learner's own
    scoring call, the loss with the batch's normaliser), without the optimizer step."""
    model = learner.weights.train_model()
    device = next(model.parameters()).device
    normalizer = LossNormalizer.of_lengths(len(c) for c in batch.completion_ids)
    model.train()
    try:
        lp, _, mask = learner._score(model, batch.prompt_ids, batch.completion_ids, with_grad=True)
        advantages = torch.tensor(batch.advantages, dtype=torch.float32, device=device)
        loss, _ = loss_fn(lp, lp.detach(), None, advantages, mask, None, normalizer=normalizer)
        loss.backward()
    finally:
        model.eval()


def world_one_gib(cfg: RunConfig, shape: ModelShape) -> tuple[float, str]:
    """What (c) holds on its one GPU at its peak, by the plan: the learner's fp32 weights and
    gradients at world size 1 (no AdamW state: no optimizer step), the larger role's worst
    micro-batch (activations, compute copies) and the learner allowance; and the parts, in words."""
    states = 8 * shape.params / GIB
    work = max(
        learner_memory(cfg, r, shape).activations + learner_memory(cfg, r, shape).fsdp_buffers
        for r in ("coder", "tester")
    )
    total = states + work + LEARNER_OVERHEAD_GIB
    return (
        total,
        f"fp32 weights and gradients {states:.1f} + worst micro-batch {work:.1f} + allowance {LEARNER_OVERHEAD_GIB:g}",
    )


def too_big(run: Run, cfg: RunConfig, shape: ModelShape, preset: str) -> Row | None:
    """An N/A row when ``preset``'s (c) would not fit the device by the plan (:func:`world_one_gib`
    over the device's memory less :data:`~codea1.engine.memory.HEADROOM_FRACTION`), else None;
    never on a CPU or with ``--tiny`` (tiny models)."""
    if not run.cuda or run.tiny:
        return None
    total = run.device_gib()
    need, parts = world_one_gib(cfg, shape)
    if need <= total * (1 - HEADROOM_FRACTION):
        return None
    value = (
        f"does not fit one {total:.1f} GiB GPU at world size 1: planned {need:.1f} GiB ({parts}); "
        "not run (on the reference node a rank holds a quarter of the states)"
    )
    how = "codea1.engine.memory.learner_memory at world size 1 vs torch.cuda.get_device_properties"
    return Row(f"(c) {preset}", "N/A", value, how, data={"planned_gib": need, "device_gib": total})


def measure_preset(run: Run, preset: str) -> Row:
    """(c) for one preset: its learner at world size 1, the worst micro-batch of each role; an N/A
    row from the plan, without building anything, where that would not fit the device."""
    real = run.cuda and not run.tiny  # the paper models at the presets' lengths
    overrides = ["loss.kl_coef=0", *([] if real else scaled_lengths(preset, CPU_SCALE))]
    cfg = preset_config(run, preset, overrides)
    plan_cfg = preset_config(run, preset, overrides)  # setup changes engine.dtype in its copy only
    shape = run.model_of(cfg)
    skipped = too_big(run, plan_cfg, shape, preset)
    if skipped is not None:
        return skipped
    loss_fn = bind_policy_loss(cfg.loss)
    ray = cfg.engine.backend == "ray"
    with contextlib.ExitStack() as stack:
        if ray:
            learner = learner_of(stack.enter_context(ray_rank(cfg, shape)))
        else:
            learner = local_learner(
                build_model(shape, run.device, pick_dtype(cfg.engine.dtype, run.device)), cfg
            )
        inputs: set[str] = set()  # what the checkpoints hold: the decoder layers' inputs
        layer = decoder_layers(learner.weights.train_model())[0]
        hook = layer.register_forward_pre_hook(
            lambda m, args, kwargs: inputs.add(dtypes([kwargs.get("hidden_states", *args[:1])])),
            with_kwargs=True,
        )
        micro_pass(learner, distinct_batch(shape.vocab, 1, 8, 8, seed=7), loss_fn)  # allocates the gradients
        hook.remove()
        resident = allocated(run.device) / GIB
        parts, measured = [], {}
        for role in ("coder", "tester"):
            rows, prompt, new = worst_micro_batch(cfg, role)
            batch = distinct_batch(shape.vocab, rows, prompt, new, seed=8)
            lengths = [prompt + new] * rows
            if len(micro_batches(lengths, getattr(cfg, role).optim)) != 1:
                raise RuntimeError(f"{role}: {rows} × {prompt + new} tokens is not one micro-batch")
            reset_peak(run.device)
            base = allocated(run.device)
            micro_pass(learner, batch, loss_fn)
            plan = learner_memory(plan_cfg, role, shape)
            predicted = plan.activations + plan.fsdp_buffers
            measured[role] = {
                "rows": rows,
                "prompt": prompt,
                "new": new,
                "measured_gib": peak_above(run.device, base),
            }
            measured[role] |= {"predicted_gib": predicted, "activations_gib": plan.activations}
            measured[role] |= {"buffers_gib": plan.fsdp_buffers, "peak_total_gib": peak_gib(run.device)}
            got = measured[role]["measured_gib"]
            sizes = f"{role} {rows} × ({prompt:,} + {new:,})"
            parts.append(
                f"{sizes}: predicted {predicted:.3g}"
                if math.isnan(got)
                else f"{sizes}: {got:.3g} vs {predicted:.3g}"
            )
    copies = "FSDP2 buffers" if ray else "autocast copy"
    how = (
        f"{'LearnerWorker.setup' if ray else 'local HFLearner'}, {shape.name}, world size 1, budget "
        f"{cfg.coder.optim.micro_batch_tokens:,} tokens, layer inputs {'+'.join(sorted(inputs))}; GiB measured "
        f"above {resident:.2f} resident (weights, gradients) vs learner_memory's activations + {copies}"
    )
    if not real:
        why = (
            "CPU: no allocator peak to measure"
            if not run.cuda
            else "--tiny: the plan is for the paper models"
        )
        return Row(f"(c) {preset}", "N/A", f"{why}; ran " + "; ".join(parts) + " GiB", how, data=measured)
    ok = all(m["measured_gib"] <= m["predicted_gib"] for m in measured.values())
    return Row(f"(c) {preset}", "PASS" if ok else "FAIL", "; ".join(parts) + " GiB", how, data=measured)


def check_memory_plan(run: Run) -> Outcome:
    """(c): each paper preset's worst micro-batch, measured against the plan."""
    details: list[Row] = []
    data: dict[str, Any] = {}
    for preset in PAPER_PRESETS:
        start = time.perf_counter()
        if run.left() <= 0:
            details.append(Row(f"(c) {preset}", "FAIL", "not run: the time budget was spent", "", 0.0))
            continue
        try:
            row = measure_preset(run, preset)
        except Exception as e:  # one preset's failure (e.g. out of memory) must not stop the others
            traceback.print_exc(file=sys.stderr)
            row = Row(f"(c) {preset}", "FAIL", one_line(e), "the measurement raised; traceback on stderr")
        release(run.device)
        row.seconds = time.perf_counter() - start
        data[preset] = row.data
        details.append(row)
    failed = [r.name.removeprefix("(c) ") for r in details if r.verdict == "FAIL"]
    if failed:
        return Outcome(
            "FAIL", f"failed: {', '.join(failed)}", "measured > predicted, or the run failed", details, data
        )
    if not run.cuda or run.tiny:
        how = f"the passes ran at 1/{CPU_SCALE} of the lengths with a tiny model; measured on CUDA without --tiny"
        why = "CPU: no allocator peak" if not run.cuda else "--tiny"
        return Outcome("N/A", f"{why} (details below)", how, details, data)
    how = "worst micro-batch of each role's token budget, allocator peak vs codea1.engine.memory"
    ran = [r for r in details if r.verdict == "PASS"]
    big = [r.name.removeprefix("(c) ") for r in details if r.verdict == "N/A"]
    value = f"measured <= predicted for {len(ran)} presets"
    if big:
        value += f"; {', '.join(big)}: do not fit this GPU at world size 1 (by the plan; not run)"
    return Outcome("PASS", value, how, details, data)


# ---- (d) the weight sync ------------------------------------------------------------------------


def check_sync(run: Run) -> Outcome:
    """(d): the rank side of a weight sync at the 1.5B shape, in its parts and whole."""
    shape = run.big
    cfg = preset_config(run, RAY_PRESET, ["loss.kl_coef=0"])
    with ray_rank(cfg, shape) as worker:
        params = learner_of(worker).params
        sync(run.device)
        start = time.perf_counter()
        cast = {n: p.detach().to(torch.bfloat16) for n, p in params.items()}
        sync(run.device)
        cast_s = time.perf_counter() - start
        start = time.perf_counter()
        whole = {n: _full(t) for n, t in cast.items()}
        sync(run.device)
        gather_s = time.perf_counter() - start
        start = time.perf_counter()
        host = {n: t.to("cpu") for n, t in whole.items()}
        copy_s = time.perf_counter() - start
        pinned_s = math.nan
        if run.cuda:
            total = sum(t.numel() for t in whole.values())
            buffer = torch.empty(total, dtype=torch.bfloat16, pin_memory=True)
            sync(run.device)
            start = time.perf_counter()
            offset = 0
            for t in whole.values():
                buffer[offset : offset + t.numel()].view(t.shape).copy_(t, non_blocking=True)
                offset += t.numel()
            sync(run.device)
            pinned_s = time.perf_counter() - start
            del buffer
        del cast, whole
        start = time.perf_counter()
        tensors = full_tensors(params, torch.bfloat16)
        full_s = time.perf_counter() - start
        start = time.perf_counter()
        synced = worker.named_weights() or {}
        named_s = time.perf_counter() - start
        rollout = str(worker.rollout_dtype).removeprefix("torch.")
        numel = sum(p.numel() for p in params.values())
    size = sum(t.numel() * t.element_size() for t in tensors.values())
    ok, reason = verdict(
        {
            "bf16 tensors": all(t.dtype == torch.bfloat16 for t in tensors.values()),
            "on the CPU": all(t.device.type == "cpu" for t in tensors.values()),
            "2 bytes per parameter": size == 2 * numel,
            "equal to the masters cast to bf16": identical(tensors, host),
            "named_weights sends every tensor": synced.keys() == params.keys(),
        }
    )
    rate = size / GIB / full_s if full_s > 0 else math.inf
    pinned = f"; into one pinned buffer {pinned_s:.2f} s" if run.cuda else ""
    value = (
        f"{size / GIB:.2f} GiB ({size:,} bytes) in {full_s:.2f} s ({rate:.1f} GiB/s); parts: cast {cast_s:.3f} s, "
        f"gather {gather_s:.3f} s, copy to CPU {copy_s:.2f} s{pinned}; LearnerWorker.named_weights "
        f"({rollout}) {named_s:.2f} s"
    )
    how = (
        f"{shape.name} shape, {numel:,} params, FSDP2 rank at world size 1 (the gather is a local copy; "
        "with N ranks each tensor is all-gathered); full_tensors(params, bf16)"
    )
    data = {"bytes": size, "seconds": full_s, "cast_s": cast_s, "gather_s": gather_s, "copy_s": copy_s}
    data |= {"pinned_s": pinned_s, "named_weights_s": named_s, "rollout_dtype": rollout}
    return Outcome(ok, with_reason(value, reason), how, data=data)


# ---- (e) DCP save and load ----------------------------------------------------------------------


@contextlib.contextmanager
def deterministic() -> Iterator[list[str]]:
    """Deterministic algorithms on (warnings, not errors, where an op has none); yields the list of
    such warnings once the block ends."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    found: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            yield found
        finally:
            torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
            found += sorted({str(w.message).split(".")[0] for w in caught if "determinis" in str(w.message)})


def learner_state(learner: HFLearner) -> dict[str, Any]:
    """Weights, AdamW state by parameter name and schedule of ``learner``, whole, on the CPU."""
    state: dict[str, Any] = {"weights": snapshot(learner.params)}
    for key in ("exp_avg", "exp_avg_sq", "step"):
        state[key] = snapshot({n: learner.optimizer.state[p][key] for n, p in learner.params.items()})
    state["schedule"] = (learner.scheduler.last_epoch, learner.scheduler.get_last_lr())
    return state


def check_dcp(run: Run) -> Outcome:
    """(e): save, load into a fresh rank, and the same next step."""
    shape = run.small
    cfg = preset_config(run, RAY_PRESET)
    loss_fn = bind_policy_loss(cfg.loss)
    prompts, n, prompt_tokens, lengths = run.sizes.correctness
    first = grouped_batch(shape.vocab, prompts, n, prompt_tokens, lengths, seed=11)
    second = grouped_batch(shape.vocab, prompts, n, prompt_tokens, lengths, seed=12)
    with (
        tempfile.TemporaryDirectory(prefix="gpu_check_dcp_") as tmp,
        deterministic() as nondeterministic,
        sdpa_kernel([SDPBackend.MATH]),  # attention kernels whose backward may use atomics are kept out
    ):
        with ray_rank(cfg, shape) as worker:
            learner = learner_of(worker)
            first.ref_logprobs = learner.logprobs(first, reference=True)
            worker.train_step(first, loss_fn)
            worker.save(tmp)
            saved = learner_state(learner)
            second.ref_logprobs = learner.logprobs(second, reference=True)
            stats_a = worker.train_step(second, loss_fn)
            after_a = snapshot(learner.params)
        files = sorted(os.listdir(tmp))
        release(run.device)
        with ray_rank(cfg, shape, seed=1) as worker:  # another initial state: load must replace it all
            learner = learner_of(worker)
            worker.load(tmp)
            loaded = learner_state(learner)
            stats_b = worker.train_step(second, loss_fn)
            after_b = snapshot(learner.params)
    moments = all(identical(saved[k], loaded[k]) for k in ("exp_avg", "exp_avg_sq", "step"))
    gap = max(float((after_a[k] - after_b[k]).abs().max()) for k in after_a)
    ok, reason = verdict(
        {
            "checkpoint holds weights.safetensors, scheduler.pt and dcp/": {
                "weights.safetensors",
                "scheduler.pt",
                "dcp",
            }
            <= set(files),
            "weights restored bit for bit": identical(saved["weights"], loaded["weights"]),
            "AdamW moments and steps restored bit for bit": moments,
            "schedule restored": saved["schedule"] == loaded["schedule"],
            "next step: same loss and grad norm": (stats_a["loss"], stats_a["grad_norm"])
            == (stats_b["loss"], stats_b["grad_norm"]),
            "next step: identical weights": identical(after_a, after_b),
        }
    )
    value = (
        f"{len(saved['weights'])} tensors and their AdamW state restored; next step loss {stats_b['loss']:.6g} "
        f"(saved rank {stats_a['loss']:.6g}), max |Δ weight| {gap:.1e}; ops without a deterministic "
        f"version: {', '.join(nondeterministic) or 'none'}"
    )
    how = (
        f"LearnerWorker.save/load at world size 1 ({'nccl' if run.cuda else 'gloo'}), {shape.name} shape, "
        "a new process group for the loading rank; deterministic algorithms, math attention"
    )
    data = {
        "files": files,
        "loss_saved_rank": stats_a["loss"],
        "loss_loaded_rank": stats_b["loss"],
        "gap": gap,
    }
    return Outcome(ok, with_reason(value, reason), how, data=data | {"nondeterministic": nondeterministic})


# ---- (f) the caching allocator after a step -----------------------------------------------------


def check_allocator(run: Run) -> Outcome:
    """(f): allocated, reserved and device-free memory at the optimizer step and after ``train_step``."""
    shape = run.big
    cfg = preset_config(run, RAY_PRESET)
    loss_fn = bind_policy_loss(cfg.loss)
    prompts, n, prompt_tokens, lengths = run.sizes.allocator
    batch = grouped_batch(shape.vocab, prompts, n, prompt_tokens, lengths, seed=13)
    with ray_rank(cfg, shape) as worker:
        learner = learner_of(worker)
        batch.ref_logprobs = learner.logprobs(batch, reference=True)
        step = step_with_grads(learner, batch, loss_fn, grads_to=None)
        if not run.cuda:
            value = f"CPU: no caching allocator; train_step ran (loss {step.stats['loss']:.4g})"
            return Outcome(
                "N/A", value, "torch.cuda.memory_reserved / memory_allocated / mem_get_info are CUDA only"
            )
        held = torch.cuda.memory_allocated(run.device) / GIB
        reserved = torch.cuda.memory_reserved(run.device) / GIB
        free, total = (b / GIB for b in torch.cuda.mem_get_info(run.device))
    unallocated = reserved - held
    outside = total - free - reserved
    ok, reason = verdict({f"reserved - allocated <= {UNALLOCATED_GIB:g} GiB": unallocated <= UNALLOCATED_GIB})
    value = (
        f"after train_step: allocated {held:.2f}, reserved {reserved:.2f} GiB (unallocated {unallocated:.2f}); "
        f"at the optimizer step: allocated {step.allocated_gib:.2f}, reserved {step.reserved_gib:.2f}, peak "
        f"{step.peak_gib:.2f}; device {free:.1f} free of {total:.1f} GiB, {outside:.2f} GiB outside the "
        f"allocator (plan allowance {LEARNER_OVERHEAD_GIB})"
    )
    how = (
        f"LearnerWorker.setup ({RAY_PRESET}: fp32 masters, bf16 reference, AdamW), {shape.name} shape, one "
        f"train_step of {len(batch)} sequences ({prompts} prompts × {n}, {prompt_tokens:,} + {lengths[0]:,})"
    )
    data = {"allocated_gib": held, "reserved_gib": reserved, "free_gib": free, "total_gib": total}
    data |= {"step_allocated_gib": step.allocated_gib, "step_reserved_gib": step.reserved_gib}
    return Outcome(ok, with_reason(value, reason), how, data=data | {"step_peak_gib": step.peak_gib})


# ---- (g) adapters under FSDP2 -------------------------------------------------------------------


def check_adapters(run: Run) -> Outcome:
    """(g): ``engine.mode: adapters`` on a Ray rank; one step changes only the coder adapter."""
    shape = run.small
    cfg = preset_config(run, RAY_PRESET, ["engine.mode=adapters"])
    loss_fn = bind_policy_loss(cfg.loss)
    prompts, n, prompt_tokens, lengths = run.sizes.correctness
    batch = grouped_batch(shape.vocab, prompts, n, prompt_tokens, lengths, seed=14)
    with ray_rank(cfg, shape) as worker:
        learner = learner_of(worker)
        peft_model = learner.weights.owner()
        trainable = set(learner.params)
        sharded = all(is_sharded(p) for p in learner.params.values())
        masters = dtypes(learner.params.values())
        before = snapshot(dict(peft_model.named_parameters()))
        batch.ref_logprobs = learner.logprobs(batch, reference=True)
        stats = worker.train_step(batch, loss_fn)
        after = snapshot(dict(peft_model.named_parameters()))
    coder = {name for name in before if "lora_" in name and ".coder." in name}
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    others = set(before) - coder
    share = changed_share({k: before[k] for k in coder}, {k: after[k] for k in coder})
    ok, reason = verdict(
        {
            "trainable = the coder adapter's LoRA tensors": trainable == coder and bool(coder),
            "adapter parameters sharded (DTensor)": sharded,
            "fp32 adapter weights": masters == "float32",
            "the coder adapter changed": bool(changed & coder),
            "base and tester adapter unchanged": not (changed & others),
            "loss finite": math.isfinite(stats["loss"]),
        }
    )
    value = (
        f"{len(changed & coder)} of {len(coder)} coder LoRA tensors changed ({100 * share:.1f} % of their "
        f"elements); {len(changed & others)} of {len(others)} base and tester tensors changed"
    )
    how = (
        f"LearnerWorker.setup ({RAY_PRESET}, engine.mode adapters: peft LoRA r {cfg.engine.lora_r} on "
        f"{', '.join(cfg.engine.lora_targets)}), {shape.name} shape, one train_step as the coder"
    )
    data = {"coder_tensors": len(coder), "changed": sorted(changed), "coder_share": share}
    return Outcome(ok, with_reason(value, reason), how, data=data)


# ---- speed (info) -------------------------------------------------------------------------------


def rollout_speed(run: Run) -> Outcome:
    """Tokens/s and peak memory of one ``HFPolicy.generate`` call with every row in one batch."""
    sizes, shape = run.sizes, run.big
    dtype = torch.bfloat16 if run.cuda else torch.float32  # what engine.dtype auto picks
    model = build_model(shape, run.device, dtype)
    policy = HFPolicy(ModuleRollout(model), TokenIdText(shape.vocab), role="coder")
    ids = random_ids(sizes.rollout_prompts, sizes.rollout_prompt_tokens, shape.vocab, 1)
    prompts = [" ".join(map(str, p)) for p in ids]
    rows = sizes.rollout_prompts * sizes.rollout_n
    params = SamplingParams(
        n=sizes.rollout_n, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=sizes.rollout_new_tokens,
        seed=0, batch_size=rows,
    )  # fmt: skip
    policy.generate(prompts[:1], SamplingParams(n=2, max_new_tokens=4, seed=0))  # warm-up
    reset_peak(run.device)
    out = policy.generate(prompts, params)
    sync(run.device)
    stats = policy.last_stats
    value = f"{stats['tokens_per_s']:.1f} tokens/s, peak {peak_gib(run.device):.2f} GiB"
    how = (
        f"HFPolicy.generate (transformers generate), {shape.name} shape {str(dtype).removeprefix('torch.')}: "
        f"{len(out)} rows in one batch, {sizes.rollout_prompt_tokens}-token prompts, <= "
        f"{sizes.rollout_new_tokens} new tokens, T=1; {int(stats['new_tokens'])} tokens in {stats['seconds']:.2f} s"
    )
    return Outcome("info", value, how, data={**stats, "peak_gib": peak_gib(run.device)})


def update_speed(run: Run) -> Outcome:
    """Log-prob and ``train_step`` tokens/s and peak memory of the local learner (second step)."""
    shape = run.big
    cfg = preset_config(run, LOCAL_PRESET)
    loss_fn = bind_policy_loss(cfg.loss)
    model = build_model(shape, run.device, pick_dtype(cfg.engine.dtype, run.device))
    learner = local_learner(model, cfg, keep_reference=True)
    prompts, n, prompt_tokens, lengths = run.sizes.update
    batch = grouped_batch(shape.vocab, prompts, n, prompt_tokens, lengths, seed=3)
    tokens = sum(len(p) + len(c) for p, c in zip(batch.prompt_ids, batch.completion_ids, strict=True))
    reset_peak(run.device)
    start = time.perf_counter()
    batch.old_logprobs = learner.logprobs(batch)
    sync(run.device)
    logprob_s = time.perf_counter() - start
    batch.ref_logprobs = learner.logprobs(batch, reference=True)
    learner.train_step(batch, loss_fn)  # warm-up step
    sync(run.device)
    start = time.perf_counter()
    stats = learner.train_step(batch, loss_fn)
    sync(run.device)
    seconds = time.perf_counter() - start
    value = (
        f"train_step {tokens / seconds:.1f} tokens/s, log-probs {tokens / logprob_s:.1f} tokens/s, peak "
        f"{peak_gib(run.device):.2f} GiB"
    )
    how = (
        f"local HFLearner ({LOCAL_PRESET}: budget {cfg.coder.optim.micro_batch_tokens:,} tokens, shared rows, "
        f"reference, policy_loss), {shape.name} shape; {len(batch)} sequences ({prompts} prompts × {n}), "
        f"{tokens:,} tokens, 2nd step {seconds:.2f} s"
    )
    return Outcome(
        "info", value, how, data={"tokens": tokens, "seconds": seconds, "logprob_s": logprob_s, **stats}
    )


# ---- the run ------------------------------------------------------------------------------------

CHECKS: tuple[tuple[str, str, Callable[[Run], Outcome]], ...] = (
    ("a", "(a) Ray learner build, world size 1", check_ray_build),
    ("b", "(b) shared-prompt rows vs one row per sequence", check_shared_rows),
    ("d", "(d) weight sync: gather, cast, copy to CPU", check_sync),
    ("e", "(e) DCP save/load round trip", check_dcp),
    ("f", "(f) caching allocator after train_step", check_allocator),
    ("g", "(g) adapters (LoRA) under FSDP2", check_adapters),
    ("c", "(c) worst micro-batch memory vs the plan", check_memory_plan),
    ("rollout", "rollout speed", rollout_speed),
    ("update", "update speed", update_speed),
)
"""In the order they run: the long (c) and the measurements without a verdict last."""


def one_line(error: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def cell(text: str) -> str:
    """Text safe for a markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def print_row(row: Row) -> None:
    """Print one table line now (a run stopped by a timeout keeps the lines already printed)."""
    seconds = "" if row.seconds is None else f"{row.seconds:.1f}"
    print(
        f"| {cell(row.name)} | {row.verdict} | {cell(row.value)} | {cell(row.how)} | {seconds} |", flush=True
    )


def run_check(run: Run, key: str, title: str, check: Callable[[Run], Outcome]) -> Outcome:
    """One check, caught: an exception is FAIL with a one-line reason; memory is released after."""
    if run.left() <= 0:
        return Outcome("FAIL", "not run: the time budget was spent", f"--budget-s {run.budget_s:g}")
    try:
        if run.simulate_failure == key:
            raise RuntimeError("simulated failure (--simulate-failure)")
        return check(run)
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        return Outcome("FAIL", one_line(e), "the check raised; traceback on stderr")
    finally:
        release(run.device)


def write_json(out: str, result: dict[str, Any]) -> None:
    """``gpu_check.json`` under ``out`` (nothing when empty)."""
    if not out:
        return
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    text = json.dumps(plain(result), indent=2, default=str, allow_nan=False)
    (path / "gpu_check.json").write_text(text + "\n", encoding="utf-8")


def plain(value: Any) -> Any:
    """``value`` with NaN and infinities as None (strict JSON) and tuples as lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def parse_device(name: str) -> torch.device | str:
    """The device to run on, or a one-line error. ``cuda:N`` is made the only visible GPU (the Ray
    rank's build uses device 0, as a Ray actor sees its GPU)."""
    try:
        device = torch.device(name)
    except RuntimeError:
        return f"--device must be cuda, cuda:N or cpu, got {name!r}"
    if device.type not in ("cuda", "cpu"):
        return f"--device must be cuda, cuda:N or cpu, got {name!r}"
    if device.type == "cuda" and device.index:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        ids = visible.split(",") if visible else [str(i) for i in range(device.index + 1)]
        if device.index >= len(ids):
            return f"--device {name}: CUDA_VISIBLE_DEVICES={visible} has no device {device.index}"
        os.environ["CUDA_VISIBLE_DEVICES"] = ids[device.index]
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS for (e)
    if device.type == "cuda" and not torch.cuda.is_available():
        return f"--device {name} but torch sees no CUDA device (--device cpu runs on the CPU)"
    return torch.device("cuda", 0) if device.type == "cuda" else device


def main(argv: list[str] | None = None) -> int:
    """Run the checks, print the table as they end, write the JSON; 1 if a line says FAIL."""
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    ap.add_argument(
        "--tiny", action="store_true", help="a tiny model and small sizes (a minute on a CPU; for CI)"
    )
    ap.add_argument(
        "--only", default="", help="comma-separated checks to run: a-g, rollout, update (default all)"
    )
    ap.add_argument("--budget-s", type=float, default=BUDGET_S, help="start no check after this many seconds")
    ap.add_argument("--out", default=os.environ.get("OUT", ""), help="directory for gpu_check.json ($OUT)")
    ap.add_argument(
        "--gpu-gib", type=float, default=0.0, help="the GPU's memory for (c)'s fit (default: the device's)"
    )
    ap.add_argument("--simulate-failure", default="", metavar="CHECK", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    keys = [k for k, _, _ in CHECKS]
    only = [k.strip() for k in args.only.split(",") if k.strip()] or keys
    unknown = sorted(set(only) - set(keys))
    if unknown:
        print(f"gpu_check: --only takes {', '.join(keys)}; unknown: {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.gpu_gib < 0:
        print(f"gpu_check: --gpu-gib must be positive, got {args.gpu_gib:g}", file=sys.stderr)
        return 2
    device = parse_device(args.device)
    if isinstance(device, str):
        print(f"gpu_check: {device}", file=sys.stderr)
        return 2
    import peft
    import transformers

    run = Run(device, args.tiny, args.budget_s, args.simulate_failure, args.gpu_gib)
    name = torch.cuda.get_device_name(device) if run.cuda else "cpu"
    memory = f", {torch.cuda.get_device_properties(device).total_memory / GIB:.1f} GiB" if run.cuda else ""
    result: dict[str, Any] = {
        "device": str(device), "device_name": name, "torch": torch.__version__,
        "transformers": transformers.__version__, "peft": peft.__version__, "tiny": args.tiny, "checks": {},
    }  # fmt: skip
    print("| check | verdict | value | how | s |")
    print("|---|---|---|---|--:|")
    versions = (
        f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}"
    )
    print_row(Row("device", "info", f"{name}{memory}", f"{versions}, peft {peft.__version__}"))
    failed = False
    for key, title, check in CHECKS:
        if key not in only:
            continue
        start = time.perf_counter()
        outcome = run_check(run, key, title, check)
        seconds = time.perf_counter() - start
        rows = [Row(title, outcome.verdict, outcome.value, outcome.how, seconds), *outcome.details]
        for row in rows:
            print_row(row)
        failed |= any(row.verdict == "FAIL" for row in rows)
        result["checks"][key] = {
            "title": title, "verdict": outcome.verdict, "value": outcome.value, "how": outcome.how,
            "seconds": seconds, "details": [dataclasses.asdict(r) for r in outcome.details], "data": outcome.data,
        }  # fmt: skip
        write_json(args.out, result)
    total = time.perf_counter() - run.started
    print_row(Row("total", "FAIL" if failed else "PASS", f"{total:.1f} s", "model builds included", total))
    result["seconds"] = total
    write_json(args.out, result)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
