"""GPU memory per learner rank and per vLLM replica of the ``paper-*-ray`` presets, by arithmetic.

No model is loaded: the architecture numbers of Qwen2.5-Coder-{1.5B,3B,7B}-Instruct are written
below (from the models' ``config.json``), the batch and sequence sizes, the learner and replica
counts and the dtype come from the presets. Everything is in GiB (2**30 bytes).

What a **learner rank** holds (its role's learner group is one FSDP2 group of
``cluster.learner_workers`` ranks; every sharded term is divided by that count):

* training state, two ways:
  - *as the engine trains* (``bf16 states``): weights, gradients and AdamW's two moments all in the
    weights' dtype (``engine.dtype`` auto = bf16 on CUDA; torch's AdamW keeps ``exp_avg`` and
    ``exp_avg_sq`` in the parameter's dtype, and FSDP2 without a mixed-precision policy keeps the
    parameters' dtype), 4 × 2 = 8 bytes per parameter;
  - *conservative* (``fp32 states``): fp32 sharded weights, gradients and both moments (verl's
    mixed precision, where only the all-gathered compute copy is bf16), 16 bytes per parameter;
* the frozen reference (``loss.kl_coef`` > 0), sharded the same way, in the weights' dtype;
* FSDP2 buffers, unsharded and transient: the all-gathered weights of the layer being computed and of
  the one prefetched, one layer's unsharded gradients before its reduce-scatter, and the root's
  embedding and output head (unsharded while the root is, with their unsharded gradients);
* activations of one micro-batch with gradient checkpointing, where the learner pads every row to
  the longest prompt + completion, so the worst case is ``micro_batch_size`` rows of
  ``max_prompt_tokens + max_new_tokens`` tokens: the checkpointed input of every decoder layer, one
  layer recomputed in backward (the tensors autograd saves for a Qwen2 layer, below, counted twice to
  cover their gradients), the decoder output and the response positions gathered from it, and one
  chunk of ``engine.logprob_chunk`` fp32 logits (logits, scaled logits, softmax, product and their
  gradients: 6 × 4 bytes per logit). Also shown at 32,768 tokens, the paper's per-GPU token budget
  (verl ``ppo_max_token_len_per_gpu``);
* a fixed allowance for the CUDA context, NCCL and cuBLAS workspaces (not computed).

Tensors autograd saves per token in one Qwen2 decoder layer (``h`` hidden, ``kv`` = kv heads ×
head dim, ``i`` intermediate, ``w`` dtype bytes): the two RMSNorms compute in fp32 (fp32 input and
normalised copies, 16·h bytes, plus the ``w``·h cast each), q, k, v, the rotated q and k, the key
and value heads repeated to the query heads, the attention output and the ``o_proj`` input
(w·(6h + 3kv)), and the MLP's gate, up, silu(gate) and product (4·w·i). Attention itself is
SDPA/flash, with no sequence² term.

What a **rollout replica** holds: its weights, the KV cache the engine is given
(``engine.vllm_kv_cache_gib``, or when 0 codea1's default: the larger ``sampling.batch_size`` at the
longest prompt + completion of either role, +10 %), and a fixed allowance for the CUDA context,
CUDA graphs and the sampler (not computed). The KV cache needed to hold the whole sampling batch at
full length is printed next to it: vLLM pages the cache, so a smaller one runs fewer sequences at a
time instead of failing.

Usage: ``python benchmarks/cluster_memory.py [--gpu-gib 80] [--preset paper-1.5b-ray ...]``.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

from codea1.config import RunConfig, load_config

GIB = float(1 << 30)
PRESETS = ("paper-1.5b-ray", "paper-3b-ray", "paper-7b-ray")
PAPER_TOKENS_PER_GPU = 32768
"""verl's ``ppo_max_token_len_per_gpu`` in the reference configs (docs/algorithm.md, "The paper's
configuration")."""
LEARNER_OVERHEAD_GIB = 1.5
"""CUDA context, NCCL buffers and cuBLAS workspace of a learner rank: an allowance, not computed."""
REPLICA_OVERHEAD_GIB = 2.0
"""CUDA context, CUDA graphs and the sampler's workspace of a vLLM replica: an allowance."""
LOGIT_BYTES = 6 * 4
"""fp32 bytes per logit of a log-prob chunk: logits, scaled logits, softmax, product, two gradients."""


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a Qwen2 decoder-only model that memory depends on (its ``config.json``)."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        """Width of the keys (or values) of all kv heads."""
        return self.kv_heads * self.head_dim

    @property
    def embedding_params(self) -> int:
        """Parameters of the input embedding (the output head is the same tensor when tied)."""
        return self.vocab * self.hidden

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer: q/k/v with biases, o, gate/up/down, two RMSNorms."""
        h, kv, i = self.hidden, self.kv_dim, self.intermediate
        attention = (h * h + h) + 2 * (h * kv + kv) + h * h
        return attention + 3 * h * i + 2 * h

    @property
    def head_params(self) -> int:
        """Parameters of the output head that are not the embedding's (0 when tied)."""
        return 0 if self.tied else self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All parameters, tied weights counted once."""
        return self.embedding_params + self.layers * self.layer_params + self.hidden + self.head_params

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """KV-cache bytes of one token: keys and values of every layer."""
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def layer_activation_bytes_per_token(self, dtype_bytes: int) -> int:
        """Bytes autograd saves per token in one decoder layer (see the module docstring)."""
        h, kv, i, w = self.hidden, self.kv_dim, self.intermediate, dtype_bytes
        norms = 2 * (16 * h + w * h)
        attention = w * (6 * h + 3 * kv)
        mlp = 4 * w * i
        return norms + attention + mlp


MODELS = {
    m.name: m
    for m in (
        ModelShape("Qwen/Qwen2.5-Coder-1.5B-Instruct", 28, 1536, 8960, 12, 2, 151936, tied=True),
        ModelShape("Qwen/Qwen2.5-Coder-3B-Instruct", 36, 2048, 11008, 16, 2, 151936, tied=True),
        ModelShape("Qwen/Qwen2.5-Coder-7B-Instruct", 28, 3584, 18944, 28, 4, 152064, tied=False),
    )
}
"""Architecture numbers from each model's ``config.json`` on the Hugging Face hub."""


def dtype_bytes(cfg: RunConfig) -> int:
    """Bytes per weight: ``engine.dtype`` (auto = bf16 on CUDA, fp32 on a CPU without native bf16)."""
    if cfg.engine.dtype == "float32":
        return 4
    if cfg.engine.dtype == "bfloat16" or cfg.engine.device.startswith("cuda"):
        return 2
    return 4


@dataclass(frozen=True)
class LearnerMemory:
    """GiB held by one learner rank of one role."""

    role: str
    ranks: int
    tokens: int
    states_bf16: float
    states_fp32: float
    reference: float
    fsdp_buffers: float
    activations: float
    activations_paper_budget: float
    overhead: float

    @property
    def total(self) -> float:
        """Everything, with the training state as the engine holds it."""
        return self.states_bf16 + self.reference + self.fsdp_buffers + self.activations + self.overhead

    @property
    def total_fp32_states(self) -> float:
        """Everything, with fp32 training state (the conservative figure)."""
        return self.total - self.states_bf16 + self.states_fp32


def activation_bytes(model: ModelShape, tokens: int, response_tokens: int, chunk: int, w: int) -> int:
    """Activation bytes of one micro-batch of ``tokens`` (padded) tokens with gradient checkpointing."""
    checkpoints = model.layers * tokens * model.hidden * w
    one_layer = 2 * tokens * model.layer_activation_bytes_per_token(w)
    hidden_out = (tokens + response_tokens) * model.hidden * w
    logits = min(chunk, response_tokens) * model.vocab * LOGIT_BYTES
    return checkpoints + one_layer + hidden_out + logits


def learner_memory(cfg: RunConfig, role: str, model: ModelShape, micro: int = 0) -> LearnerMemory:
    """What one rank of ``role``'s learner group holds at its peak (see the module docstring);
    ``micro`` replaces the role's ``optim.micro_batch_size`` when given."""
    w = dtype_bytes(cfg)
    ranks = cfg.cluster.learner_workers
    sampling = getattr(cfg, role).sampling
    micro = micro or getattr(cfg, role).optim.micro_batch_size
    p = model.params
    root = model.embedding_params + model.head_params
    buffers = 3 * model.layer_params * w + 2 * root * w
    row = sampling.max_prompt_tokens + sampling.max_new_tokens
    tokens = micro * row
    chunk = cfg.engine.logprob_chunk
    worst = activation_bytes(model, tokens, micro * sampling.max_new_tokens, chunk, w)
    share = sampling.max_new_tokens / row
    budget = PAPER_TOKENS_PER_GPU
    paper = activation_bytes(model, budget, int(budget * share), chunk, w)
    reference = p * w / ranks if cfg.loss.keeps_reference else 0.0
    return LearnerMemory(
        role=role,
        ranks=ranks,
        tokens=tokens,
        states_bf16=4 * w * p / ranks / GIB,
        states_fp32=16 * p / ranks / GIB,
        reference=reference / GIB,
        fsdp_buffers=buffers / GIB,
        activations=worst / GIB,
        activations_paper_budget=paper / GIB,
        overhead=LEARNER_OVERHEAD_GIB,
    )


@dataclass(frozen=True)
class ReplicaMemory:
    """GiB held by one vLLM rollout replica (one engine serves one role's samples)."""

    weights: float
    kv_cache: float
    kv_full_batch: float
    overhead: float

    @property
    def total(self) -> float:
        """Weights, the configured KV cache and the allowance."""
        return self.weights + self.kv_cache + self.overhead


def replica_memory(cfg: RunConfig, model: ModelShape) -> ReplicaMemory:
    """What one replica holds: weights, KV cache (configured, and needed for the full batch)."""
    w = dtype_bytes(cfg)
    longest = max(r.sampling.max_prompt_tokens + r.sampling.max_new_tokens for r in (cfg.coder, cfg.tester))
    sequences = max(cfg.coder.sampling.batch_size, cfg.tester.sampling.batch_size)
    full = sequences * longest * model.kv_bytes_per_token(w)
    configured = (
        cfg.engine.vllm_kv_cache_gib * GIB if cfg.engine.vllm_kv_cache_gib > 0 else math.ceil(full * 1.1)
    )
    return ReplicaMemory(
        weights=model.params * w / GIB,
        kv_cache=configured / GIB,
        kv_full_batch=full / GIB,
        overhead=REPLICA_OVERHEAD_GIB,
    )


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
        "(full batch at full length) | allowance | **replica total** | fits "
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


def main(argv: list[str] | None = None) -> int:
    """Print the learner and replica tables for the given presets."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", action="append", help="a preset (repeatable); default: the paper-*-ray ones")
    ap.add_argument("--gpu-gib", type=float, default=80.0, help="GPU memory to compare against (GiB)")
    args = ap.parse_args(argv)
    names = args.preset or list(PRESETS)
    print("Learner rank (one per GPU), GiB; worst case = every row of a micro-batch at full length.\n")
    print("\n".join(learner_table(names, args.gpu_gib)))
    print("\nRollout replica (one per GPU), GiB.\n")
    print("\n".join(replica_table(names, args.gpu_gib)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
