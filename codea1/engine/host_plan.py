"""The host memory a local CPU run is expected to peak at, part by part, before its first step; and
that of a node running a ``-ray`` preset on GPUs (:func:`ray_node_host_plan`, printed by
``benchmarks/cluster_memory.py --check``).

Pure arithmetic on a :class:`~codea1.config.RunConfig` and a :class:`~codea1.engine.memory.ModelShape`,
like the GPU plans of ``engine.memory``; ``codea1 train`` prints :func:`host_plan`'s total and parts
when the run trains on this machine's CPU (``memory/peak_rss_gib`` is what it then measures). The
parts, for the training process (the sandbox's workers are processes of their own, a few tens of MB
each):

* ``runtime``: Python, torch, transformers and, with vLLM rollouts, vLLM's libraries and buffers
  (:data:`RUNTIME_GIB`, :data:`VLLM_RUNTIME_GIB`: measured allowances, not computed).
* ``learners``: ``adapters`` mode, the frozen base once (the model cache's safetensors, mapped: its
  pages count in the resident set once read) and each role's LoRA weights, gradients and AdamW
  moments (:data:`STATE_COPIES` copies in the weights' dtype); ``separate`` mode, each role's whole
  model with its training state and, when the KL term needs it, its frozen reference.
* ``engine``: the rollout copy. vLLM on a CPU packs every linear layer for oneDNN; in ``adapters``
  mode the embedding and an untied head's weight are the learners' tensors (``frozen_tensors``), so
  of the vocabulary-sized matrices only the head's packed copy is its own (otherwise the embedding,
  its unused packed copy and the head's weight and packed copy, one fewer when tied).
  ``transformers`` rollouts hold one full merged copy per engine.
* ``kv_cache``: vLLM's KV cache (``engine.vllm_kv_cache_gib`` or the whole sampling batch at full
  length, :func:`~codea1.engine.memory.default_kv_bytes`).
* ``work``: the larger of one update's activations (the larger role's micro-batch at full length,
  :func:`~codea1.engine.memory.activation_bytes`) and a role switch's merged weights (``adapters``
  mode: every adapted matrix, built before the engine takes it).
* ``kept``: with ``engine.cpu_heap: keep``, the freed memory the process keeps for reuse instead of
  returning it (:data:`KEPT_UPDATES` updates' worth: a measured allowance, not computed); none in a
  process on TCMalloc, where the setting does nothing (its peaks measured at or below glibc's
  returning ones, docs/LOG.md, 2026-12-06).

The activations assume gradient checkpointing (without it, an update holds every layer's) and rows
at their longest, so real steps usually stay under the total; see docs/training.md (Memory).

Imports: config, engine.memory, engine.host_memory, engine.sleep_mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from codea1.config import RunConfig
from codea1.engine.host_memory import tcmalloc_loaded
from codea1.engine.memory import (
    GIB,
    ModelShape,
    activation_bytes,
    default_kv_bytes,
    dtype_bytes,
    worst_micro_batch,
)
from codea1.engine.sleep_mode import sleep_level

RUNTIME_GIB = 0.7
"""Python, torch, transformers, tokenizers and codea1 in the training process, before any model."""
VLLM_RUNTIME_GIB = 0.5
"""vLLM's libraries and its in-process engine's buffers, besides weights and KV cache."""
KEPT_UPDATES = 2.0
"""Updates' worth of freed memory a process that keeps it holds at its peak (``engine.cpu_heap:
keep``), an allowance on the high side: keeping added +2.2 GiB to one a1 step of
``qwen-coder-0.5b-cpu`` (planned update 1.2 GiB in bf16; the returned run also mapped blocks of 4 MiB
and more on their own), +0.25 GiB to ``demo-cpu`` (0.4 GiB) and +0.56 GiB to ``tiny-cpu`` (1.4 GiB)
(docs/LOG.md, 2026-12-05)."""
STATE_COPIES = 4
"""Weight, gradient and AdamW's two moments of one trained parameter, each in the weights' dtype: a
CPU learner trains its weights in their own dtype, with no fp32 master copy (bf16: 8 bytes per
parameter, fp32: 16; ``hf_local.learner.master_weights_compute_dtype``)."""


@dataclass(frozen=True)
class HostPlan:
    """GiB each part of a local CPU run holds at its peak (see the module docstring)."""

    runtime: float
    learners: float
    engine: float
    kv_cache: float
    work: float
    kept: float = 0.0

    @property
    def total(self) -> float:
        """The expected peak of the training process's resident set."""
        return self.runtime + self.learners + self.engine + self.kv_cache + self.work + self.kept

    def line(self) -> str:
        """``expected peak 8.0 GiB (runtime 1.2, learners 2.6, ...)``: one line for a banner."""
        parts = ", ".join(
            f"{name} {value:.1f}"
            for name, value in (
                ("runtime", self.runtime),
                ("learners", self.learners),
                ("engine", self.engine),
                ("KV cache", self.kv_cache),
                ("update", self.work),
                ("kept heap", self.kept),
            )  # fmt: skip
            if value > 0
        )
        return f"expected peak {self.total:.1f} GiB ({parts})"


def host_plan(
    cfg: RunConfig, model: ModelShape, *, weight_bytes: int, rollout: str, one_model: bool = False
) -> HostPlan:
    """What a local CPU run of ``cfg`` on ``model`` holds at its peak, with weights of
    ``weight_bytes`` bytes per element, ``rollout`` (``vllm`` or ``transformers``) sampling, and
    ``one_model`` when one model plays both roles (self-play, golden tests)."""
    w = weight_bytes
    adapters = cfg.engine.mode == "adapters"
    vllm = rollout == "vllm"
    vocab_matrix = model.vocab * model.hidden * w
    layers = model.layers * model.layer_params * w
    models = 1 if one_model else 2
    if adapters:
        lora = model.lora_params(cfg.engine.lora_targets, cfg.engine.lora_r)
        learners = model.params * w + models * lora * STATE_COPIES * w
        engines = 1
    else:
        reference = model.params * w if cfg.loss.keeps_reference else 0
        learners = models * (model.params * STATE_COPIES * w + reference)
        engines = models
    if not vllm:
        engine = engines * model.params * w
    elif adapters:
        engine = layers + vocab_matrix
    else:
        engine = engines * (layers + (3 if model.tied else 4) * vocab_matrix)
    kv = engines * default_kv_bytes(cfg, model, w) if vllm else 0
    update = max(_update_bytes(cfg, role, model, w) for role in ("coder", "tester"))
    merge = layers if adapters else 0
    work = max(update, merge) / GIB
    return HostPlan(
        runtime=RUNTIME_GIB + (VLLM_RUNTIME_GIB if vllm else 0.0),
        learners=learners / GIB,
        engine=engine / GIB,
        kv_cache=kv / GIB,
        work=work,
        kept=KEPT_UPDATES * work if cfg.engine.cpu_heap == "keep" and not tcmalloc_loaded() else 0.0,
    )


def _update_bytes(cfg: RunConfig, role: str, model: ModelShape, w: int) -> int:
    """Activations of one micro-batch of ``role`` at full length (checkpointed layers)."""
    tokens, response = worst_micro_batch(cfg, role)
    return activation_bytes(model, tokens, response, cfg.engine.logprob_chunk, w)


# --------------------------------------------------------------------------------------------------
# The host memory of a Ray node (the ``-ray`` presets on GPUs)
# --------------------------------------------------------------------------------------------------

LEARNER_PROCESS_GIB = 2.0
"""Host memory of one learner rank's process besides its model state (Python, torch, transformers,
the CUDA and NCCL libraries and host buffers): an allowance, not measured (no GPU run yet)."""
REPLICA_PROCESS_GIB = 4.0
"""Host memory of one rollout replica (its Ray actor and vLLM's engine process: two CUDA
runtimes, vLLM's libraries, the tokenizer, the scheduler): an allowance, not measured."""


@dataclass(frozen=True)
class NodeHostPlan:
    """GiB of host memory of one node running every rank and replica of a ``-ray`` preset on CUDA
    (:func:`ray_node_host_plan`), each term over the whole node."""

    runtime: float
    """The processes' own memory: :data:`LEARNER_PROCESS_GIB` per rank, :data:`REPLICA_PROCESS_GIB`
    per replica."""
    reading: float
    """One whole model in fp32, read by a group's rank 0 while the group starts
    (``hf_local.sharded_load``; the groups start one after another)."""
    reading_per_rank: float
    """The same with every rank of a group reading it at once, as the ranks did before
    ``sharded_load`` (for comparison; not part of any phase)."""
    references: float
    """The frozen references' shards, in the weights' dtype, pinned by FSDP2's ``CPUOffloadPolicy``."""
    offloaded: float
    """``colocate``: each trained role's fp32 weights and AdamW's two moments (``adapters``: the
    adapters' and the fp32 base), moved to host memory while the replicas sample
    (``HFLearner.offload``; gradients are freed after each update)."""
    sleep_backups: float
    """Weights vLLM backs up in pinned host memory while a replica sleeps: sleep level 1 (``adapters``
    mode, whose syncs write only the adapted projections); none at level 2 (``separate`` mode,
    whose every sync writes all weights)."""
    groups: int
    """Learner groups (trained roles), started one after another."""
    saving: float
    """A checkpoint: one role's whole fp32 weights gathered on its rank 0's host (roles save one
    after another)."""

    @property
    def start(self) -> float:
        """While the last group starts: every reference (counted whole), the earlier groups' fp32
        weights offloaded (a third of their training state: no AdamW moments before the first step),
        and the one copy the starting group's rank 0 reads."""
        earlier = (self.groups - 1) / self.groups
        return self.runtime + self.references + self.offloaded / 3 * earlier + self.reading

    @property
    def steady(self) -> float:
        """While the replicas sample: references, offloaded training state, sleep backups."""
        return self.runtime + self.references + self.offloaded + self.sleep_backups

    @property
    def peak(self) -> float:
        """The larger of the start and a step that saves a checkpoint."""
        return max(self.start, self.steady + self.saving)


def ray_node_host_plan(cfg: RunConfig, models: Mapping[str, ModelShape], *, shared: bool) -> NodeHostPlan:
    """The host memory of one node holding all of a Ray run of ``cfg`` on CUDA: its
    ``cluster.learner_workers`` ranks per trained role and ``cluster.rollout_replicas`` replicas per
    group (one group when ``shared`` or in ``adapters`` mode), ``models`` by role. The weights'
    dtype is :func:`~codea1.engine.memory.dtype_bytes` (bf16 on CUDA); masters and AdamW are fp32."""
    w = dtype_bytes(cfg.engine)
    c = cfg.cluster
    adapters = cfg.engine.mode == "adapters"
    trained = ["coder"] if shared else ["coder", "tester"]
    groups = 1 if shared or adapters else 2
    colocate = c.placement == "colocate"
    references = offloaded = 0.0
    for role in trained:
        p = models[role].params
        if cfg.loss.keeps_reference and not adapters:
            references += w * p
        if colocate:
            lora = models[role].lora_params(cfg.engine.lora_targets, cfg.engine.lora_r)
            offloaded += 4 * p + 12 * lora if adapters else 12 * p  # adapters: the fp32 base, once
    largest = max(models[r].params for r in trained)
    served = models["coder"].params
    level = sleep_level(full_syncs=not adapters)  # the level the replicas sleep at (level 1 backs weights up)
    backups = groups * c.rollout_replicas * w * served if colocate and level == 1 else 0.0
    return NodeHostPlan(
        runtime=len(trained) * c.learner_workers * LEARNER_PROCESS_GIB
        + groups * c.rollout_replicas * REPLICA_PROCESS_GIB,
        reading=4 * largest / GIB,
        reading_per_rank=c.learner_workers * 4 * largest / GIB,
        references=references / GIB,
        offloaded=offloaded / GIB,
        sleep_backups=backups / GIB,
        groups=len(trained),
        saving=4 * largest / GIB,
    )
