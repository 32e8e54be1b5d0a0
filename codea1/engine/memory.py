"""GPU memory of the learners and the vLLM engines, and the plan of every GPU a run uses.

Pure arithmetic on a :class:`~codea1.config.RunConfig` and a model's architecture numbers
(:class:`ModelShape`, from its ``config.json``); nothing here touches a device. The vLLM engines
are started with these plans (``vllm_local.roles``, ``ray_cluster.rollout_replica``);
``benchmarks/cluster_memory.py`` prints them and replays them (``--check``).

**vLLM's start-up rule** (vLLM 0.32, ``v1/worker/gpu_worker.py`` ``init_device`` then
``v1/worker/utils.py`` ``request_memory``): once the worker's CUDA context exists it empties its own
allocator, reads the device's free memory and raises unless ``free >= ceil(gpu_memory_utilization x
total)``, whether or not ``kv_cache_memory_bytes`` is given (given, it is the KV cache's size and the
fraction is only checked). Free memory is the device's: whatever other processes hold counts,
including blocks a training process's caching allocator keeps. vLLM's default fraction is 0.92, so
a second engine, or an engine beside a learner, cannot start without a fraction of its own.

**The plan of a GPU** (:class:`GpuPlan`): what lives on it beside the awake engines (*residents*:
learners, a process's CUDA context), then the engines in the order the code starts them, each with a
KV cache, a ``gpu_memory_utilization`` and a ``max_num_seqs`` (:func:`plan_gpu`), and, where learners
and engines share the GPU on CUDA, what it holds while the engines sleep and the learners compute
(*asleep*):

* KV cache, derived (``engine.vllm_kv_cache_gib`` 0): the GPU's memory less the headroom
  (:func:`headroom_gib`, :data:`HEADROOM_FRACTION` of the GPU), the residents and every engine's
  weights and overhead (:func:`engine_overhead_gib`), shared equally by the engines, at most
  :func:`default_kv_bytes` (the whole sampling batch at full length) and at most
  :data:`MAX_UTILIZATION` of the GPU per engine. A KV cache holding fewer than one prompt's
  ``sampling.n`` samples at full length is no plan: ``problem`` says why. Explicit: the size given.
* ``gpu_memory_utilization``: the engine's weights, overhead and KV cache, less the CUDA context it
  holds before vLLM reads the free memory, over the GPU's memory, rounded up to 0.001; the
  fractions of the engines and the residents so sum to at most 1 and, with a derived KV cache, each
  start passes the rule.
* ``max_num_seqs``: the sequences the KV cache holds at a quarter of the longest prompt +
  completion (:data:`SEQUENCE_SHARE`; about what sampled sequences average), at most the served
  roles' ``sampling.batch_size`` and :data:`MAX_NUM_SEQS`. vLLM admits a request only when its
  prompt's blocks are free and preempts the newest when the cache fills, so sequences longer than
  that cost recomputation, not a failure.

**Sharing a GPU** (the local backend's vLLM engines on CUDA, ``placement: colocate`` on Ray): the
engines are started with ``enable_sleep_mode`` and sleep (``LLM.sleep``: KV cache discarded,
weights discarded at level 2 in ``separate`` mode or backed up in host memory at level 1 in
``adapters`` mode, ``sleep_mode.sleep_level``) before a learner computes; a sync wakes their weights, loads
the new ones and then wakes the KV cache (``vllm_local.sleep``). Asleep, an engine keeps only what
vLLM allocates outside its CuMem pool, :data:`ENGINE_FIXED_GIB` (its CUDA context, CUDA graphs,
cuBLAS workspace: ``CuMemAllocator.sleep`` releases the pool and empties torch's cache). The Ray
ranks colocated with replicas also move their weights and AdamW state to host memory while the
replicas sample (``HFLearner.offload``; gradients are already freed at the end of every update), so
beside awake replicas a rank holds only its CUDA context and NCCL buffers
(:data:`LEARNER_OVERHEAD_GIB`), and the replicas start with that GPU. The local learners stay on
the GPU: beside awake engines they hold their training state at rest (weights and AdamW moments,
no gradients), while the engines sleep their peak. The GPU's peak is the larger of the two phases;
every plan leaves :func:`headroom_gib` free in both. A weight sync wakes only the synced engine's
weights while the learner's gathered tensors exist, which is less than either phase holds.
:func:`startup_replay` replays vLLM's rule on a plan, engine by engine in start order, then the
GPU's peak in both phases against its headroom.

**What is computed and what is an allowance.** Weights, gradients, optimizer state, references,
FSDP2 buffers, activations, the shared-prompt mask (bounded by the learner's own mask limit),
log-prob chunks, KV caches and an engine's prefill and sampler buffers come from the model's shapes
and the code. Three terms are allowances, to be replaced by what ``scripts/gpu_check.sh`` measures
on a GPU: :data:`LEARNER_OVERHEAD_GIB` (its allocator stage prints the device's use beyond torch's
reserved memory against it), :data:`ENGINE_FIXED_GIB` with :data:`ENGINE_CONTEXT_GIB`, and
:data:`PROCESS_CONTEXT_GIB` (the vLLM stages, which need a machine with vLLM).

Imports: config.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from codea1.config import EngineConfig, RunConfig

GIB = float(1 << 30)
PAPER_TOKENS_PER_GPU = 32768
"""verl's ``ppo_max_token_len_per_gpu`` in the reference configs (docs/algorithm.md, "The paper's
configuration")."""
LEARNER_OVERHEAD_GIB = 1.5
"""CUDA context, NCCL buffers and cuBLAS workspace of a learner process: an allowance, not computed;
measured by ``scripts/gpu_check.sh`` (its allocator stage: the device's use outside torch's
reserved memory after a ``train_step``). What an offloaded rank keeps on its GPU."""
ENGINE_FIXED_GIB = 1.0
"""An engine's CUDA context, CUDA graphs and cuBLAS workspace: an allowance, not computed (to be
measured by ``scripts/gpu_check.sh`` on a machine with vLLM). All of it lies outside vLLM's CuMem
pool, so it is also what a sleeping engine keeps."""
ENGINE_CONTEXT_GIB = 0.5
"""The part of :data:`ENGINE_FIXED_GIB` an engine holds before vLLM reads the free memory (an
allowance, as above)."""
PROCESS_CONTEXT_GIB = 0.5
"""The CUDA context of a Ray replica actor's own process, beside its engine's process (an allowance,
as above)."""
HEADROOM_FRACTION = 0.05
"""The share of every GPU a plan leaves free in each phase (fragmentation, the allowances)."""
HEADROOM_GIB = 1.0
"""Unused by the plans since the headroom became a fraction (:func:`headroom_gib`); kept for readers
of the old constant."""
MAX_MASK_ELEMENTS = 1 << 28
"""The learner's limit on a shared-prompt mask (rows × width², ``hf_local.logprobs.MAX_MASK_ELEMENTS``;
a test keeps the two equal): past it the sequences get a row each and no mask."""
MASK_BYTES_PER_ELEMENT = 1 + 2 + 2
"""Bytes per mask element at once: the boolean mask (held through the pass: every checkpointed layer
saves the same tensor), SDPA's conversion of it to the compute dtype in one attention call, and the
memory-efficient kernel's copy padded to an aligned width; its construction
(``shared_prompt_mask``: at most two boolean temporaries besides it, and two ``L × L`` ones) happens
before the decoder runs and holds no more."""
MAX_UTILIZATION = 0.92
"""The largest fraction one engine is given: vLLM's own default."""
MAX_NUM_SEQS = 1024
"""The most sequences one engine runs at once: vLLM's own default on 70+ GiB GPUs."""
SEQUENCE_SHARE = 4
"""``max_num_seqs`` counts sequences of 1/``SEQUENCE_SHARE`` of the longest prompt + completion."""
PREFILL_TOKENS = 16384
"""Tokens of one vLLM scheduling step on CUDA: its default ``max_num_batched_tokens`` for offline
inference on 70+ GiB GPUs (8,192 on an A100), the batch its start-up profile run computes."""
SAMPLER_BYTES_PER_LOGIT = 4 * 4
"""fp32 logits, processed log-probs, probabilities and sampling noise of one running sequence."""
LOGIT_BYTES = 6 * 4
"""fp32 bytes per logit of a log-prob chunk: logits, scaled logits, softmax, product, two gradients."""
KV_MARGIN = 1.1
"""The default KV cache holds the whole sampling batch at full length, plus this margin."""
MIN_KV_BYTES = 64 << 20
"""The smallest default KV cache."""


# --------------------------------------------------------------------------------------------------
# Models and configuration sizes
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only model that memory depends on (its ``config.json``); the
    parameter count is a Qwen2 layer's (q/k/v biases, o, gate/up/down, two RMSNorms)."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool
    explicit_head_dim: int = 0
    """``head_dim`` when the config gives one (0: ``hidden // heads``)."""

    @classmethod
    def from_hf_config(cls, config: Any, name: str = "") -> ModelShape:
        """The shape of a transformers config (missing sizes default as transformers does)."""
        heads = config.num_attention_heads
        return cls(
            name=name,
            layers=config.num_hidden_layers,
            hidden=config.hidden_size,
            intermediate=getattr(config, "intermediate_size", None) or 4 * config.hidden_size,
            heads=heads,
            kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            vocab=getattr(config, "vocab_size", None) or 0,
            tied=bool(getattr(config, "tie_word_embeddings", False)),
            explicit_head_dim=getattr(config, "head_dim", None) or 0,
        )

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.explicit_head_dim or self.hidden // self.heads

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

    def lora_params(self, targets: Sequence[str], rank: int) -> int:
        """Parameters of rank-``rank`` LoRA adapters on the ``targets`` projections of every layer."""
        h, kv, i, q = self.hidden, self.kv_dim, self.intermediate, self.heads * self.head_dim
        sizes = {"q_proj": h + q, "k_proj": h + kv, "v_proj": h + kv, "o_proj": q + h}
        sizes |= {"gate_proj": h + i, "up_proj": h + i, "down_proj": i + h}
        return self.layers * rank * sum(sizes.get(t, 0) for t in targets)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """KV-cache bytes of one token: keys and values of every layer."""
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def layer_activation_bytes_per_token(self, dtype_bytes: int) -> int:
        """Bytes autograd saves per token in one decoder layer (see :func:`learner_memory`)."""
        h, kv, i, w = self.hidden, self.kv_dim, self.intermediate, dtype_bytes
        norms = 2 * (16 * h + w * h)
        attention = w * (6 * h + 3 * kv)
        mlp = 4 * w * i
        return norms + attention + mlp


def headroom_gib(total_gib: float) -> float:
    """What a plan leaves free on a GPU of ``total_gib``: :data:`HEADROOM_FRACTION` of it."""
    return HEADROOM_FRACTION * total_gib


def shared_mask_gib(engine: EngineConfig) -> float:
    """The shared-prompt mask at its limit (:data:`MAX_MASK_ELEMENTS` × :data:`MASK_BYTES_PER_ELEMENT`)
    when the learner shares prompts (``engine.share_prompts``), else 0."""
    return MAX_MASK_ELEMENTS * MASK_BYTES_PER_ELEMENT / GIB if engine.share_prompts else 0.0


def dtype_bytes(engine: EngineConfig) -> int:
    """Bytes per weight: ``engine.dtype`` (auto = bf16 on CUDA, fp32 on a CPU without native bf16)."""
    if engine.dtype == "float32":
        return 4
    if engine.dtype == "bfloat16" or engine.device.startswith("cuda"):
        return 2
    return 4


def max_model_len(cfg: RunConfig) -> int:
    """The longest prompt + completion either role samples."""
    return max(r.sampling.max_prompt_tokens + r.sampling.max_new_tokens for r in (cfg.coder, cfg.tester))


def max_sequences(cfg: RunConfig, roles: Sequence[str] = ("coder", "tester")) -> int:
    """The larger ``sampling.batch_size`` of ``roles`` (by default both)."""
    return max(getattr(cfg, r).sampling.batch_size for r in roles)


def full_batch_kv_bytes(cfg: RunConfig, model: ModelShape, weight_bytes: int) -> int:
    """KV bytes of :func:`max_sequences` sequences at :func:`max_model_len` tokens."""
    return max_sequences(cfg) * max_model_len(cfg) * model.kv_bytes_per_token(weight_bytes)


def default_kv_bytes(cfg: RunConfig, model: ModelShape, weight_bytes: int) -> int:
    """``engine.vllm_kv_cache_gib``, or when 0 the whole sampling batch at full length
    (:func:`full_batch_kv_bytes`) plus :data:`KV_MARGIN` (at least :data:`MIN_KV_BYTES`): the CPU
    engine's KV cache, and the most a derived GPU plan gives."""
    if cfg.engine.vllm_kv_cache_gib > 0:
        return int(cfg.engine.vllm_kv_cache_gib * GIB)
    return max(MIN_KV_BYTES, math.ceil(full_batch_kv_bytes(cfg, model, weight_bytes) * KV_MARGIN))


def transformers_rollout_bytes(cfg: RunConfig, model: ModelShape, *, local: bool = True) -> tuple[int, int]:
    """``(KV cache, sampling copy)`` bytes of one transformers ``generate`` rollout of ``model`` on
    CUDA: the KV cache of :func:`max_sequences` rows at :func:`max_model_len` tokens in the dtype it
    samples in (:func:`dtype_bytes`: bf16 on CUDA), and the copy of the weights it samples from. The
    local learner (``local``) keeps fp32 master weights of a bf16 run in ``separate`` mode, and the
    rollout samples from a bf16 copy of them made for each ``generate`` call
    (``hf_local.weights.ModuleRollout``); an fp32 run, ``adapters`` mode (a bf16 base) and the Ray
    replicas (their own bf16 model) sample the weights themselves (no copy)."""
    w = dtype_bytes(cfg.engine)
    kv = max_sequences(cfg) * max_model_len(cfg) * model.kv_bytes_per_token(w)
    copy = w * model.params if local and w < 4 and cfg.engine.mode == "separate" else 0
    return kv, copy


# --------------------------------------------------------------------------------------------------
# One learner
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LearnerMemory:
    """GiB held by one learner (one rank of a role's learner group on Ray) of one role."""

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
    base: float = 0.0
    """``adapters`` mode: the frozen base the adapters sit on."""
    mask: float = 0.0
    """The shared-prompt attention mask at the learner's limit (:func:`shared_mask_gib`)."""
    reference_host: float = 0.0
    """The reference kept in host memory instead (the Ray ranks on CUDA: FSDP2 ``CPUOffloadPolicy``)."""

    @property
    def total(self) -> float:
        """Everything, with the training state in the weights' dtype."""
        return (
            self.states_bf16
            + self.base
            + self.reference
            + self.fsdp_buffers
            + self.activations
            + self.mask
            + self.overhead
        )

    @property
    def at_rest(self) -> float:
        """What stays between updates with fp32 training state: weights and AdamW's two moments
        (``train_step`` frees the gradients and empties the CUDA cache at its end), the frozen base
        and reference, the allowance."""
        return self.states_fp32 * 3 / 4 + self.base + self.reference + self.overhead

    @property
    def total_fp32_states(self) -> float:
        """Everything, with fp32 training state (the conservative figure)."""
        return self.total - self.states_bf16 + self.states_fp32

    @property
    def peak(self) -> float:
        """Everything, with the training state as both backends hold it on CUDA: fp32."""
        return self.total_fp32_states


def activation_bytes(
    model: ModelShape,
    tokens: int,
    response_tokens: int,
    chunk: int,
    w: int,
    residual: int = 0,
    *,
    checkpointed: bool = True,
) -> int:
    """Activation bytes of one micro-batch of ``tokens`` (padded) tokens with gradient checkpointing
    (without it, ``checkpointed`` False: every layer's saved tensors, and one layer's gradients);
    ``residual`` is the bytes per element of the residual stream (default ``w``: fp32 when fp32
    master weights run under autocast, whose embedding output and residual additions stay fp32)."""
    r = residual or w
    per_layer = tokens * model.layer_activation_bytes_per_token(w)
    if checkpointed:
        checkpoints, one_layer = model.layers * tokens * model.hidden * r, 2 * per_layer
    else:
        checkpoints, one_layer = 0, (model.layers + 1) * per_layer
    hidden_out = (tokens + response_tokens) * model.hidden * r
    logits = min(chunk, response_tokens) * model.vocab * LOGIT_BYTES
    return checkpoints + one_layer + hidden_out + logits


def worst_micro_batch(cfg: RunConfig, role: str, micro: int = 0) -> tuple[int, int]:
    """``(tokens, response tokens)`` of ``role``'s largest micro-batch: ``micro`` (default
    ``optim.micro_batch_size``) rows of ``max_prompt_tokens + max_new_tokens``, or with
    ``optim.micro_batch_tokens`` (and no ``micro``) that many tokens, at least one full-length row;
    the response share is the row's."""
    sampling, optim = getattr(cfg, role).sampling, getattr(cfg, role).optim
    row = sampling.max_prompt_tokens + sampling.max_new_tokens
    if micro or not optim.micro_batch_tokens:
        tokens = (micro or optim.micro_batch_size) * row
    else:
        tokens = max(optim.micro_batch_tokens, row)
    return tokens, tokens * sampling.max_new_tokens // row


def learner_memory(
    cfg: RunConfig,
    role: str,
    model: ModelShape,
    micro: int = 0,
    *,
    local: bool | None = None,
    weight_bytes: int = 0,
) -> LearnerMemory:
    """What one learner of ``role`` holds at its peak on CUDA; ``micro`` replaces the role's
    micro-batch (``optim.micro_batch_size``, or ``optim.micro_batch_tokens`` when set) by that many
    sequences, ``local`` the backend (``engine.backend``), ``weight_bytes`` the weights' dtype bytes
    (:func:`dtype_bytes`).

    * Training state: weights, gradients and AdamW's two moments of the trained parameters (the
      LoRA adapters in ``adapters`` mode), fp32 on CUDA for both backends: 16 bytes per parameter
      (``states_fp32``; the local learner keeps fp32 master weights of bf16 weights and computes
      under autocast, the Ray ranks shard fp32 with FSDP2 mixed precision). ``states_bf16``, all
      in the weights' dtype (4 x 2 = 8 bytes per parameter), is the pure-bf16 figure, for
      comparison. On Ray every sharded term is divided by the ``cluster.learner_workers`` ranks.
      Gradients count as live: the plan does not rely on their being freed between updates.
    * The frozen reference (``loss.kl_coef`` > 0; not in ``adapters`` mode, which disables the
      adapters instead), sharded the same way, in the weights' dtype: on the local learner's GPU;
      on Ray in host memory (``reference_host``: the ranks shard it with FSDP2's
      ``CPUOffloadPolicy`` on CUDA, as the reference's ``ref.fsdp_config.param_offload``, and its
      layers come in one at a time like the trained model's, within ``fsdp_buffers``). In
      ``adapters`` mode the frozen base (``base``: fp32 on Ray, in the weights' dtype locally).
    * Compute copies (``fsdp_buffers``). Ray, unsharded and transient: the all-gathered weights of
      the layer being computed and of the one prefetched, one layer's unsharded gradients before
      its reduce-scatter, and the root's embedding and output head with their gradients. Local:
      autocast's bf16 copy of the trained weights, cached through a forward pass.
    * Activations of one micro-batch with gradient checkpointing (``engine.gradient_checkpointing``;
      without it every layer's saved tensors). The learner pads every row to
      the longest, so the worst case is ``micro_batch_size`` rows of ``max_prompt_tokens +
      max_new_tokens`` (with ``micro_batch_tokens``, that many tokens, or one full-length row
      when longer): every decoder layer's checkpointed input (fp32 in the local learner's
      ``separate`` mode, whose fp32 master weights keep the residual stream fp32 under autocast), one layer recomputed in backward
      (the tensors autograd saves for a Qwen2 layer, counted twice to cover their gradients: the
      two RMSNorms in fp32, 16·h bytes plus the w·h cast each; q, k, v, the rotated q and k, the
      repeated keys and values, the attention output and the ``o_proj`` input, w·(6h + 3kv); the
      MLP's gate, up, silu(gate) and product, 4·w·i; attention is SDPA/flash, no sequence² term),
      the decoder output and the response positions gathered from it, and one chunk of
      ``engine.logprob_chunk`` fp32 logits (:data:`LOGIT_BYTES` per logit: the vocabulary-wide
      logits exist for one chunk of response positions at a time, recomputed in backward). Also
      given at :data:`PAPER_TOKENS_PER_GPU` tokens (``activations_paper_budget``). Activations are
      not offloaded (the reference offloads its checkpoints; the plans fit without it).
    * The shared-prompt mask at its limit (``mask``, :func:`shared_mask_gib`).
    * :data:`LEARNER_OVERHEAD_GIB`, an allowance for the CUDA context, NCCL and cuBLAS.
    """
    w = weight_bytes or dtype_bytes(cfg.engine)
    local = cfg.engine.backend == "local" if local is None else local
    ranks = 1 if local else cfg.cluster.learner_workers
    sampling = getattr(cfg, role).sampling
    adapters = cfg.engine.mode == "adapters"
    p = model.params
    trained = model.lora_params(cfg.engine.lora_targets, cfg.engine.lora_r) if adapters else p
    root = model.embedding_params + model.head_params
    if local:
        buffers = w * trained if w < 4 else 0
    else:
        buffers = 3 * model.layer_params * w + 2 * root * w
    row = sampling.max_prompt_tokens + sampling.max_new_tokens
    tokens, response = worst_micro_batch(cfg, role, micro)
    chunk = cfg.engine.logprob_chunk
    # the local learner's fp32 master weights (separate mode) keep the residual stream in fp32
    residual = 4 if local and not adapters and w < 4 else w
    checkpointed = cfg.engine.gradient_checkpointing
    worst = activation_bytes(model, tokens, response, chunk, w, residual, checkpointed=checkpointed)
    budget = PAPER_TOKENS_PER_GPU
    paper_response = budget * sampling.max_new_tokens // row
    paper = activation_bytes(model, budget, paper_response, chunk, w, residual, checkpointed=checkpointed)
    reference = p * w / ranks if cfg.loss.keeps_reference and not adapters else 0.0
    # the Ray ranks on CUDA shard the reference with CPUOffloadPolicy (the reference's param_offload):
    # its shards live in host memory and each layer is copied in for its all-gather (in fsdp_buffers)
    reference_host, reference = (0.0, reference) if local else (reference, 0.0)
    base = (w if local else 4) * p / ranks if adapters else 0.0
    return LearnerMemory(
        role=role,
        ranks=ranks,
        tokens=tokens,
        states_bf16=4 * w * trained / ranks / GIB,
        states_fp32=16 * trained / ranks / GIB,
        reference=reference / GIB,
        fsdp_buffers=buffers / GIB,
        activations=worst / GIB,
        activations_paper_budget=paper / GIB,
        overhead=LEARNER_OVERHEAD_GIB,
        base=base / GIB,
        mask=shared_mask_gib(cfg.engine),
        reference_host=reference_host / GIB,
    )


# --------------------------------------------------------------------------------------------------
# One engine
# --------------------------------------------------------------------------------------------------


def engine_overhead_gib(model: ModelShape, max_num_seqs: int, weight_bytes: int) -> float:
    """What a CUDA vLLM engine holds besides its weights and KV cache: :data:`ENGINE_FIXED_GIB`,
    the activations of one :data:`PREFILL_TOKENS` step (an MLP's gate, up and product and four
    hidden-wide tensors per token) and the sampler's buffers of ``max_num_seqs`` sequences."""
    prefill = PREFILL_TOKENS * (3 * model.intermediate + 4 * model.hidden) * weight_bytes
    sampler = max_num_seqs * model.vocab * SAMPLER_BYTES_PER_LOGIT
    return ENGINE_FIXED_GIB + (prefill + sampler) / GIB


@dataclass(frozen=True)
class EngineMemory:
    """GiB of one vLLM engine with the configured KV cache (:func:`default_kv_bytes`)."""

    weights: float
    kv_cache: float
    kv_full_batch: float
    overhead: float

    @property
    def total(self) -> float:
        """Weights, the configured KV cache and the overhead."""
        return self.weights + self.kv_cache + self.overhead


def engine_memory(cfg: RunConfig, model: ModelShape, weight_bytes: int = 0) -> EngineMemory:
    """What one engine holds with the configured KV cache, and what the whole batch would need."""
    w = weight_bytes or dtype_bytes(cfg.engine)
    return EngineMemory(
        weights=model.params * w / GIB,
        kv_cache=default_kv_bytes(cfg, model, w) / GIB,
        kv_full_batch=full_batch_kv_bytes(cfg, model, w) / GIB,
        overhead=engine_overhead_gib(model, min(max_sequences(cfg), MAX_NUM_SEQS), w),
    )


# --------------------------------------------------------------------------------------------------
# The plan of one GPU
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resident:
    """Something that holds a GPU's memory through the run (a learner at its peak, a context)."""

    what: str
    gib: float


@dataclass(frozen=True)
class EngineSlot:
    """An engine to plan: its name, model and the roles it samples."""

    what: str
    model: ModelShape
    roles: tuple[str, ...]


@dataclass(frozen=True)
class EngineBudget:
    """What one vLLM engine is started with, and what it holds."""

    what: str
    weights_gib: float
    overhead_gib: float
    kv_bytes: int
    kv_token_bytes: int
    max_model_len: int
    max_num_seqs: int
    utilization: float
    """``gpu_memory_utilization``."""

    @property
    def kv_gib(self) -> float:
        """The KV cache in GiB."""
        return self.kv_bytes / GIB

    @property
    def kv_tokens(self) -> int:
        """Tokens the KV cache holds."""
        return self.kv_bytes // self.kv_token_bytes

    @property
    def full_sequences(self) -> int:
        """Sequences of ``max_model_len`` tokens the KV cache holds."""
        return self.kv_tokens // self.max_model_len

    @property
    def used_gib(self) -> float:
        """Weights, overhead and KV cache: what the engine holds once started."""
        return self.weights_gib + self.overhead_gib + self.kv_gib


@dataclass(frozen=True)
class GpuPlan:
    """One GPU: its residents beside the awake engines, its engines in start order, what it holds
    while the engines sleep (``asleep``: the learners computing and each engine's
    :data:`ENGINE_FIXED_GIB`; empty where the engines never sleep) and why it has no plan
    (``problem``)."""

    what: str
    total_gib: float
    residents: tuple[Resident, ...] = ()
    engines: tuple[EngineBudget, ...] = ()
    problem: str = ""
    asleep: tuple[Resident, ...] = ()

    @property
    def resident_gib(self) -> float:
        """What the residents hold."""
        return sum(r.gib for r in self.residents)

    @property
    def awake_gib(self) -> float:
        """Residents and awake engines."""
        return self.resident_gib + sum(e.used_gib for e in self.engines)

    @property
    def asleep_gib(self) -> float:
        """What the GPU holds while its engines sleep (0 where they never do)."""
        return sum(r.gib for r in self.asleep)

    @property
    def used_gib(self) -> float:
        """The GPU's peak: the larger of the two phases."""
        return max(self.awake_gib, self.asleep_gib)


def utilization(gib: float, total_gib: float) -> float:
    """``gib`` as a fraction of ``total_gib``, rounded up to 0.001 (at least 0.001)."""
    return max(1, math.ceil(gib / total_gib * 1000 - 1e-9)) / 1000


def plan_gpu(
    cfg: RunConfig,
    what: str,
    total_gib: float,
    residents: Sequence[Resident],
    slots: Sequence[EngineSlot],
    weight_bytes: int = 0,
    *,
    learners: Sequence[Resident] = (),
) -> GpuPlan:
    """The plan of a GPU of ``total_gib`` holding ``residents`` and the engines of ``slots`` (in
    start order); with ``learners`` (what the GPU holds while its learners compute), the engines
    sleep then, each keeping :data:`ENGINE_FIXED_GIB`. See the module docstring for the rules."""
    w = weight_bytes or dtype_bytes(cfg.engine)
    headroom = headroom_gib(total_gib)
    asleep = (
        (*learners, *(Resident(f"{s.what}, asleep", ENGINE_FIXED_GIB) for s in slots)) if learners else ()
    )
    length = max_model_len(cfg)
    caps = [min(max_sequences(cfg, s.roles), MAX_NUM_SEQS) for s in slots]
    fixed = [
        s.model.params * w / GIB + engine_overhead_gib(s.model, cap, w)
        for s, cap in zip(slots, caps, strict=True)
    ]
    resident = sum(r.gib for r in residents)
    problem = ""
    if cfg.engine.vllm_kv_cache_gib > 0:
        kv = [int(cfg.engine.vllm_kv_cache_gib * GIB) for _ in slots]
    else:
        share = (total_gib - headroom - resident - sum(fixed)) / max(len(slots), 1)
        kv = [
            max(
                0,
                min(
                    int(share * GIB),
                    int((MAX_UTILIZATION * total_gib - f) * GIB),
                    default_kv_bytes(cfg, s.model, w),
                ),
            )
            for s, f in zip(slots, fixed, strict=True)
        ]
        for s, size in zip(slots, kv, strict=True):
            n = max(getattr(cfg, r).sampling.n for r in s.roles)
            need = n * length * s.model.kv_bytes_per_token(w)
            if size < need and not problem:
                problem = (
                    f"{s.what}: {size / GIB:.1f} GiB left for its KV cache, under the {need / GIB:.1f} GiB "
                    f"of {n} sequences of {length:,} tokens ({resident:.1f} GiB resident, {sum(fixed):.1f} "
                    f"GiB of engine weights and overhead, on a {total_gib:.1f} GiB GPU)"
                )
    sleeping = sum(r.gib for r in asleep)
    if sleeping > total_gib - headroom and not problem:
        problem = (
            f"{sleeping:.1f} GiB while the engines sleep and the learners compute, over the "
            f"{total_gib - headroom:.1f} GiB a {total_gib:.1f} GiB GPU leaves after its headroom"
        )
    engines = []
    for s, cap, f, size in zip(slots, caps, fixed, kv, strict=True):
        token = s.model.kv_bytes_per_token(w)
        fraction = utilization(f + size / GIB - ENGINE_CONTEXT_GIB, total_gib)
        if fraction > 1 and not problem:
            problem = (
                f"{s.what}: {f + size / GIB:.1f} GiB with a {size / GIB:.1f} GiB KV cache "
                f"(engine.vllm_kv_cache_gib) exceeds a {total_gib:.1f} GiB GPU"
            )
        engines.append(
            EngineBudget(
                what=s.what,
                weights_gib=s.model.params * w / GIB,
                overhead_gib=f - s.model.params * w / GIB,
                kv_bytes=size,
                kv_token_bytes=token,
                max_model_len=length,
                max_num_seqs=max(1, min(cap, size // token // max(1, length // SEQUENCE_SHARE))),
                utilization=fraction,
            )
        )
    return GpuPlan(what, total_gib, tuple(residents), tuple(engines), problem, tuple(asleep))


def local_plan(
    cfg: RunConfig, models: Mapping[str, ModelShape], total_gib: float, *, shared: bool, weight_bytes: int = 0
) -> GpuPlan:
    """The one GPU of the local backend: the learners (one when ``shared``: self-play, golden),
    their references, then the vLLM engines (a coder and a tester engine in ``separate`` mode, else
    one for both roles). The engines sleep while a learner computes (``asleep``: the learners' fp32
    training state with gradients, the references, the largest micro-batch's activations and
    shared-prompt mask, the CUDA context); beside the awake engines the learners hold their state
    at rest (weights and AdamW moments; the residents). ``models`` maps each role to its model
    (the tester's may be left out when ``shared``)."""
    w = weight_bytes or dtype_bytes(cfg.engine)
    separate = cfg.engine.mode == "separate"
    learners = ["coder"] if shared else ["coder", "tester"]
    mems = {r: learner_memory(cfg, r, models[r], local=True, weight_bytes=w) for r in learners}
    computing = [Resident(f"{r} learner", mems[r].states_fp32) for r in learners]
    resting = [Resident(f"{r} learner at rest", mems[r].states_fp32 * 3 / 4) for r in learners]
    frozen = []
    if not separate:
        frozen.append(Resident("frozen base", mems["coder"].base))
    if separate and cfg.loss.keeps_reference:  # roles starting from one model share one reference
        firsts = {cfg.engine.role_model(r): r for r in reversed(learners)}
        frozen += [Resident(f"{r} reference", mems[r].reference) for r in sorted(firsts.values())]
    trained = [(r, models["coder" if shared else r]) for r in ("coder", "tester")]
    passes = [learner_memory(cfg, r, m, local=True, weight_bytes=w) for r, m in trained]
    act = max(m.fsdp_buffers + m.activations + m.mask for m in passes)  # one update at a time
    context = Resident("CUDA context", LEARNER_OVERHEAD_GIB)
    asleep = [*computing, *frozen, Resident("activations", act), context]
    residents = [*resting, *frozen, context]
    if separate and not shared:
        slots = [EngineSlot(f"{r} engine", models[r], (r,)) for r in ("coder", "tester")]
    else:
        slots = [EngineSlot("engine", models["coder"], ("coder", "tester"))]
    what = f"{len(learners)} learner{'s' * (len(learners) > 1)}, {len(slots)} engine{'s' * (len(slots) > 1)}"
    return plan_gpu(cfg, what, total_gib, residents, slots, w, learners=asleep)


def learner_plan(
    cfg: RunConfig, role: str, model: ModelShape, total_gib: float, weight_bytes: int = 0
) -> GpuPlan:
    """The GPU of one Ray learner rank of ``role`` with no replica beside it."""
    peak = learner_memory(cfg, role, model, local=False, weight_bytes=weight_bytes).peak
    return GpuPlan(f"{role} learner rank", total_gib, (Resident(f"{role} learner rank", peak),))


def replica_plan(
    cfg: RunConfig, roles: Sequence[str], model: ModelShape, total_gib: float, weight_bytes: int = 0
) -> GpuPlan:
    """The GPU of one Ray rollout replica sampling ``roles``, with ``cluster.gpus_per_worker`` < 1
    beside other actors holding the rest of the GPU, and its actor's CUDA context. With
    ``placement: colocate`` it shares the GPU with a learner rank of ``roles[0]`` (the group's
    host): the replica sleeps while the rank computes at its peak (``asleep``), and the rank is
    offloaded to host memory, keeping its CUDA context and NCCL buffers, while the replica samples."""
    host = roles[0]
    residents, learners = [], []
    colocated = cfg.cluster.placement == "colocate"
    if colocated:
        peak = learner_memory(cfg, host, model, local=False, weight_bytes=weight_bytes).peak
        residents.append(Resident(f"{host} learner rank, offloaded", LEARNER_OVERHEAD_GIB))
        learners.append(Resident(f"{host} learner rank", peak))
    share = min(1.0, cfg.cluster.gpus_per_worker) if cfg.cluster.gpus_per_worker > 0 else 1.0
    if share < 1:
        residents.append(Resident("other actors", (1 - share) * total_gib))
    residents.append(Resident("replica actor", PROCESS_CONTEXT_GIB))
    if colocated:
        learners += residents[1:]
    name = "+".join(roles)
    what = f"{host} learner rank + {name} replica" if colocated else f"{name} replica"
    slots = [EngineSlot(f"{name} replica", model, tuple(roles))]
    return plan_gpu(cfg, what, total_gib, residents, slots, weight_bytes, learners=learners)


def ray_plans(
    cfg: RunConfig, models: Mapping[str, ModelShape], total_gib: float, *, shared: bool, weight_bytes: int = 0
) -> list[GpuPlan]:
    """One plan per kind of GPU of a Ray run: each learner rank's, each replica's (``split``), or
    each learner rank's with its replica (``colocate``), grouped as ``build_ray_roles`` does."""
    learners = ["coder"] if shared else ["coder", "tester"]
    adapters = cfg.engine.mode == "adapters"
    groups = {"coder": ["coder", "tester"]} if shared or adapters else {r: [r] for r in learners}
    colocate = cfg.cluster.placement == "colocate"
    plans = [
        learner_plan(cfg, r, models[r], total_gib, weight_bytes)
        for r in learners
        if not (colocate and r in groups)
    ]
    plans += [
        replica_plan(cfg, served, models[name], total_gib, weight_bytes) for name, served in groups.items()
    ]
    return plans


# --------------------------------------------------------------------------------------------------
# Replaying vLLM's start-up rule
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineStart:
    """vLLM's start-up check for one engine: the free memory it reads and what it requests (GiB)."""

    what: str
    free_gib: float
    requested_gib: float


@dataclass(frozen=True)
class Replay:
    """:func:`startup_replay`'s result: each engine's check, the GPU's peak and what went wrong."""

    starts: tuple[EngineStart, ...]
    peak_gib: float
    violations: tuple[str, ...]


def startup_replay(plan: GpuPlan) -> Replay:
    """Start ``plan``'s engines in order as vLLM 0.32 does (see the module docstring): each reads
    the free memory (the GPU less the residents, the engines started before it and its own CUDA
    context) and must find ``ceil(gpu_memory_utilization x total)``; its KV cache must hold one
    ``max_model_len`` sequence (vLLM refuses to start otherwise), and its fraction must cover what it
    holds. Then the GPU's peak, the larger of the awake and the asleep phase, must fit and leave
    :func:`headroom_gib` free."""
    total, used = plan.total_gib, plan.resident_gib
    starts, violations = [], []
    for e in plan.engines:
        free = total - used - ENGINE_CONTEXT_GIB
        requested = math.ceil(e.utilization * total * GIB) / GIB
        starts.append(EngineStart(e.what, free, requested))
        if not 0 < e.utilization <= 1:
            violations.append(f"{e.what}: gpu_memory_utilization {e.utilization:g} is not in (0, 1]")
        elif free < requested:
            violations.append(
                f"{e.what}: vLLM refuses to start, {free:.1f} GiB free < {e.utilization:.3f} x "
                f"{total:.1f} GiB = {requested:.1f} GiB"
            )
        if e.kv_tokens < e.max_model_len:
            violations.append(
                f"{e.what}: a KV cache of {e.kv_tokens:,} tokens holds no {e.max_model_len:,}-token "
                "sequence (vLLM refuses to start)"
            )
        if e.used_gib - ENGINE_CONTEXT_GIB > requested + 1e-9:
            violations.append(
                f"{e.what}: holds {e.used_gib:.1f} GiB, more than its fraction {e.utilization:.3f}"
            )
        used += e.used_gib
    peak = max(used, plan.asleep_gib)
    if peak > total:
        violations.append(f"the peak, {peak:.1f} GiB, exceeds the GPU's {total:.1f} GiB")
    elif total - peak < headroom_gib(total) - 1e-9:
        violations.append(
            f"the peak, {peak:.1f} GiB, leaves {total - peak:.1f} GiB of the GPU's {total:.1f} GiB free, "
            f"under the {HEADROOM_FRACTION:.0%} headroom ({headroom_gib(total):.1f} GiB)"
        )
    return Replay(tuple(starts), peak, tuple(violations))
