"""The run configuration: one dataclass tree, strict YAML presets, command-line overrides.

Every field has a docstring. ``load_config`` reads a preset (a name under ``codea1/presets/`` or a path),
applies ``section.field=value`` overrides, and checks invariants; unknown keys and wrong types fail
with a message that names the key and the valid alternatives. Only the standard library and PyYAML
are used.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from codea1.limits import (
    EVAL_SIZE_BOUNDS,
    MAX_SANDBOX_MEMORY_MB,
    SIZE_BOUNDS,
    completions_error,
    size_errors,
)


class ConfigError(ValueError):
    """A configuration file or override is invalid; the message says which key and why."""


# --------------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataConfig:
    """Which problems to train on (evaluate checkpoints with `codea1 eval code --model RUN_DIR/checkpoints/step_N/coder`)."""

    train: str = "demo:train"
    """Training problems: ``demo:train``, ``demo:heldout``, ``humanevalplus``, ``mbppplus``, ``humaneval``,
    ``kodcode`` or a path to a JSONL/parquet file (our format or the reference implementation's)."""
    problems_per_step: int = 2
    """B: problems drawn per training step (256 in the paper)."""
    seed: int = 1
    """Seed of the problem sampler (the paper's ``data.seed``)."""
    shuffle: bool = True
    """Draw problems in a seeded random order (without replacement within an epoch)."""
    limit: int = 0
    """Use only the first N problems of the training set (0 = all)."""


@dataclass(frozen=True)
class SamplingConfig:
    """How one role samples completions."""

    n: int = 4
    """Completions per prompt (the GRPO group size; 8 in the paper)."""
    temperature: float = 1.0
    """Sampling temperature (1.0 in the paper)."""
    top_p: float = 1.0
    """Nucleus sampling threshold (1.0 = off)."""
    top_k: int = 0
    """Top-k sampling (0 = off)."""
    max_new_tokens: int = 256
    """Maximum generated tokens per completion (4,096 in the paper)."""
    max_prompt_tokens: int = 2048
    """Prompts longer than this are skipped with a recorded reason, never truncated."""
    batch_size: int = 16
    """Sequences generated together in one batch."""


@dataclass(frozen=True)
class OptimConfig:
    """Optimisation of one role's policy."""

    lr: float = 1e-6
    """AdamW learning rate (1e-6 in the paper)."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    grad_clip: float = 1.0
    """Global gradient-norm clip."""
    warmup_steps: int = 10
    """Linear warm-up steps, then half-cosine decay to ``min_lr_ratio`` × lr."""
    min_lr_ratio: float = 0.0
    """Final learning rate as a fraction of ``lr``."""
    micro_batch_size: int = 4
    """Sequences per forward/backward pass; gradients are accumulated over the mini-batch."""
    micro_batch_tokens: int = 0
    """Token budget per forward/backward pass instead of a sequence count (0 = off): sequences are
    taken in order while the micro-batch's count × longest prompt + completion stays within it (a
    longer sequence is alone). Set, it replaces ``micro_batch_size``. The update is the same either
    way; only memory and speed change (docs/engines.md, "Micro-batches by tokens")."""
    mini_batches: int = 1
    """Optimizer steps per training step (the paper's 256/128 = 2)."""
    ppo_epochs: int = 1
    """Passes over the role's samples per training step."""
    skip_without_signal: bool = False
    """Take no optimizer step when every advantage of the role's batch is 0 (every group had equal
    rewards), instead of stepping on the KL term alone. Off in the paper: AdamW's momentum then
    keeps moving the weights on steps that carry no reward signal (docs/algorithm.md, D10). The
    learning-rate schedule counts the optimizer steps taken."""


@dataclass(frozen=True)
class CoderConfig:
    """The Code LLM role."""

    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """Rollout sampling for code."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimisation for the coder."""


@dataclass(frozen=True)
class TesterConfig:
    """The Test LLM role."""

    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """Rollout sampling for tests (one prompt per code sample)."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimisation for the tester."""
    update_n: int = 1
    """Code groups per problem whose suites train the tester (largest reward spread); 0 = all."""
    view: Literal["whitebox", "blackbox"] = "whitebox"
    """Whitebox: the tester sees the candidate code (Code-A1). Blackbox: question only (Self-Play)."""
    whitebox_share: float = 1.0
    """White-box view only: the share of the step's (problem, code) tester prompts that show the code;
    the others get the black-box prompt, still one per code (docs/algorithm.md, deviation D14). Which
    ones is a seeded draw per step (the tester's sampling seed). 1.0 = every prompt (the paper)."""
    tests_per_suite: int = 8
    """Number of asserts the tester prompt asks for."""


@dataclass(frozen=True)
class RewardConfig:
    """Reward formulas (docs/algorithm.md, items 4–11)."""

    alpha: float = 0.5
    """Weight of validity vs adversarial failure in the test reward."""
    n_norm: int = 8
    """N: the fixed denominator of Val and Adv (8 in the reference code)."""
    normalize_by_suite: bool = False
    """Normalise Val/Adv by the suite's own test count instead of N (the paper figure's variant)."""
    nonprintable_penalty: bool = True
    """Subtract the non-printable character ratio of the response from the test reward."""
    float_rel_tol: float = 1e-6
    """Relative tolerance when comparing floats (type-aware equality)."""
    float_abs_tol: float = 1e-6
    """Absolute tolerance when comparing floats."""
    mutation_weight: float = 0.0
    """Weight w of the mutation term added to R_T (docs/algorithm.md, deviation D12): w x the share of
    the reference's live mutants the suite's valid tests kill, each counted once; 0 = the paper's R_T."""
    mutation_kinds_weight: float = 0.0
    """Weight of the mutation-kinds term added to R_T (docs/algorithm.md, deviation D13): the share of
    the live mutants' fault kinds (arithmetic, comparison, ...) of which the suite's valid tests kill
    at least one mutant; 0 = off. Uses the same mutants as the mutation term."""
    mutation_mutants: int = 16
    """Mutants of the reference drawn per problem for that term (D12: Cosmic-Ray's operators and
    second-order AST mutants, never eval's first-order ones; equivalent ones then dropped)."""
    mutation_seed: int = 0
    """Seed of that draw (the mutants are fixed per problem for the whole run)."""


@dataclass(frozen=True)
class MistakeBookConfig:
    """Experience replay of tests that once broke code (docs/algorithm.md, items 19–23)."""

    enabled: bool = True
    """Turn off for the "w/o Mistake Book" ablation."""
    top_k: int = 8
    """History tests retrieved per problem (by frequency)."""
    capacity_per_problem: int = 64
    """Entries kept per problem; evicts lowest frequency, then oldest."""


@dataclass(frozen=True)
class LossConfig:
    """GRPO advantages and the PPO-clip policy loss (docs/algorithm.md, items 17–18)."""

    clip_low: float = 0.20
    """Lower clip ratio ε_low."""
    clip_high: float = 0.28
    """Upper clip ratio ε_high (clip-higher)."""
    dual_clip: float = 10.0
    """Dual-clip constant c for negative advantages (0 disables)."""
    aggregation: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"] = "token-mean"
    """How per-token losses are reduced."""
    kl_coef: float = 0.001
    """Coefficient of the k3 KL penalty against the frozen reference (0 disables)."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient."""
    adv_norm_std: bool = True
    """Divide group-centred rewards by the group std (GRPO); False = Dr.GRPO-style."""
    adv_eps: float = 1e-6
    """Epsilon added to the group std."""
    old_logprobs: Literal["recompute", "sampling"] = "recompute"
    """Old log-probs of the PPO ratio: the learner's own (the paper; read off the training pass when
    the update is one optimizer step, else recomputed in a pass before it) or the sampling policy's
    (equal up to numerics in fp32 at temperature 1; saves that pass for multi-step updates)."""

    @property
    def keeps_reference(self) -> bool:
        """Whether the learners keep a frozen reference model: only the KL term reads it."""
        return self.kl_coef > 0

    @property
    def needs_entropy(self) -> bool:
        """Whether the learners compute per-token entropy: only the entropy bonus reads it."""
        return self.entropy_coef > 0


@dataclass(frozen=True)
class SandboxConfig:
    """Execution of untrusted code and tests."""

    workers: int = 0
    """Sandbox worker processes (0 = one per CPU core)."""
    test_cpu_s: float = 1.0
    """CPU-time budget per test call (seconds)."""
    load_cpu_s: float = 2.0
    """CPU-time budget for executing a program's definitions."""
    wall_factor: float = 3.0
    """Wall-clock backstop = wall_factor × CPU budget + 0.5 s."""
    memory_mb: int = 2048
    """Address-space limit per program (MiB)."""
    max_output_bytes: int = 65536
    """Cap on an encoded return value crossing to the trusted side."""
    isolation: Literal["auto", "strict", "none"] = "auto"
    """auto: every layer the kernel offers; strict: fail if a layer is missing; none: rlimits only."""


CPU_MMAP_THRESHOLD_MAX = 32 * 2**20
"""The largest ``engine.cpu_mmap_threshold`` glibc accepts on a 64-bit host (``DEFAULT_MMAP_THRESHOLD_MAX``)."""


@dataclass(frozen=True)
class EngineConfig:
    """Models and how they are held."""

    kind: Literal["transformers", "scripted"] = "transformers"
    """Engine implementation (``scripted`` is a deterministic fake for tests)."""
    backend: Literal["local", "ray"] = "local"
    """local: every model in this process; ray: learner groups and rollout replicas as Ray actors
    (see ``cluster``)."""
    rollout: Literal["auto", "transformers", "vllm"] = "auto"
    """What samples rollouts: vLLM or transformers ``generate`` (auto: vLLM when it imports)."""
    vllm_kv_cache_gib: float = 0.0
    """vLLM's KV cache in GiB (0 = derived: on CUDA from the plan of the engine's GPU, on CPU enough
    for the largest sampling batch at full length)."""
    mode: Literal["separate", "adapters"] = "separate"
    """separate: two full models (the paper); adapters: one frozen base + two LoRA adapters."""
    coder_model: str = "smollm2-135m"
    """Hub id, local directory, GGUF file, or ``smollm2-135m`` (the model of the ``demo`` extra)."""
    tester_model: str = ""
    """Model of the tester (empty = same as the coder)."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Weights dtype (auto: bf16 on CUDA and on CPUs with native bf16 (AVX512-BF16 or AMX), else fp32)."""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    logprob_chunk: int = 1024
    """Tokens per chunk when computing log-probs, so full-vocabulary logits are never all held."""
    cpu_mmap_threshold: int = 0
    """Bytes, on a host with glibc: blocks of host memory at least this large get a mapping of their
    own, returned to the system when freed, in every process that trains a model (0: glibc's
    default, a threshold that rises to 32 MiB as large blocks are freed, and the freed activations of
    an update then stay in a fragmented heap). At most 33554432; costs page faults (docs/training.md).
    Only with ``cpu_heap: return``."""
    cpu_heap: Literal["return", "keep"] = "return"
    """What a process that trains a model on the CPU does with the host memory it frees. return: the C heap's
    free pages go back to the system after each update, log-prob pass and rollout, and large blocks
    get mappings of their own (glibc's default); the next phase faults them in again. keep (glibc
    only): no block gets a mapping of its own and nothing is trimmed, so an update reuses the pages
    of the last one without a page fault; faster learner phases for a larger resident set between
    them (docs/training.md)."""
    cpu_malloc: Literal["system", "tcmalloc"] = "system"
    """The allocator of ``codea1 train``'s process (local backend). tcmalloc: the command restarts itself once, before
    it loads anything, with TCMalloc preloaded (``LD_PRELOAD``; Debian's ``libtcmalloc-minimal4``, or
    the library ``CODEA1_TCMALLOC`` names), and ``cpu_heap`` and ``cpu_mmap_threshold`` then do
    nothing; where the library is missing the run goes on with the C library's ``malloc`` and those
    two settings, and says so. A CPU learner's freed activations are then reused without page faults
    at the resident set of ``cpu_heap: return`` (docs/training.md)."""
    share_prompts: bool = True
    """Learner passes run a prompt once for all its samples in a micro-batch (one decoder row, a
    custom attention mask; SDPA and eager attention only; on CUDA or with a token budget the rows
    are capped and used only where they pay, ``hf_local.logprobs``). False: one row per sequence."""
    lora_r: int = 16
    """LoRA rank (adapters mode)."""
    lora_alpha: int = 32
    """LoRA alpha (adapters mode)."""
    lora_dropout: float = 0.0
    """LoRA dropout (adapters mode)."""
    lora_targets: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )
    """Module names that receive LoRA adapters."""
    cache_dir: str = ""
    """Where dequantised GGUF models are cached (empty = the user cache directory)."""

    def role_model(self, role: str) -> str:
        """The model spec a role starts from: the tester's defaults to the coder's."""
        return (self.tester_model or self.coder_model) if role == "tester" else self.coder_model

    @property
    def lora_scale(self) -> float:
        """LoRA's ``alpha / r``: the factor of ``B @ A`` in a merged weight (adapters mode)."""
        return self.lora_alpha / self.lora_r


@dataclass(frozen=True)
class ClusterConfig:
    """Where the Ray backend (``engine.backend: ray``) runs each part of a step (docs/cluster.md)."""

    address: str = ""
    """Ray cluster to join (``auto``, ``HOST:6379``, ``ray://HOST:10001``); empty = ``RAY_ADDRESS``
    if set, else a local cluster started for the run."""
    num_cpus: int = 0
    """CPUs of the local cluster started when there is no address (0 = all)."""
    learner_workers: int = 1
    """Ranks of each role's learner group (one FSDP2 data-parallel group per role)."""
    rollout_replicas: int = 1
    """Sampling engines per role; a call's prompts are split across them."""
    placement: Literal["split", "colocate"] = "split"
    """split: each role's learners and replicas on their own devices (the paper); colocate: a role's
    learner ranks and replicas share devices."""
    gpus_per_worker: float = 0.0
    """GPUs of each learner rank and each replica (0 on CPU clusters)."""
    cpus_per_worker: float = 1.0
    """CPUs reserved by each learner rank and each replica."""
    sandbox_fanout: bool = True
    """Run the execution grid as Ray tasks on every node's CPUs (else in the driver's process pool)."""
    sandbox_batch: int = 8
    """Program tasks per Ray call of the sandbox fan-out."""


@dataclass(frozen=True)
class TrainConfig:
    """The training run."""

    method: Literal["a1", "golden", "selfplay"] = "a1"
    """a1: Code-A1; golden: coder alone on golden tests; selfplay: one model plays both roles."""
    steps: int = 4
    """Training steps."""
    seed: int = 0
    """Global seed (torch, numpy, python)."""
    run_dir: str = "runs/{preset}-{time}"
    """Run directory; ``{preset}`` and ``{time}`` are filled in."""
    save_every: int = 2
    """Checkpoint every N steps (and always at the end)."""
    keep_last: int = 2
    """Checkpoints kept."""

    @property
    def trains_tester(self) -> bool:
        """The method has a Test LLM that writes suites and is trained (a1, selfplay; golden has
        none: no tester rollouts, no Mistake Book, no ``tester/`` metrics)."""
        return self.method != "golden"


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation inside the run (docs/metrics.md, ``eval/``): held-out problems at step 0 (before
    the first update), every ``every`` steps and at the last step, through the rollout engine."""

    data: str = ""
    """Held-out problems (a spec as ``data.train``; they need a harness or golden tests); "" = off."""
    limit: int = 0
    """Use only the first N held-out problems (0 = all)."""
    n: int = 4
    """Coder samples per problem (pass@1, and pass@k for every standard k <= n)."""
    temperature: float = 0.7
    """Sampling temperature of both roles' evaluation."""
    top_p: float = 0.95
    """Nucleus sampling of both roles' evaluation."""
    max_new_tokens: int = 256
    """Completion cap of both roles' evaluation."""
    seed: int = 0
    """Sampling seed, the same at every point (sample j of problem i is paired across points)."""
    every: int = 0
    """Evaluate every N steps (0 = only at step 0 and the last step)."""
    tester: bool = True
    """Also evaluate the Test LLM (a1, selfplay): one suite of ``tests`` tests per problem."""
    tests: int = 5
    """Tests considered per suite (``eval tests --k``)."""
    max_mutants: int = 30
    """Mutants of the reference per problem: the wrong codes the suites must catch."""
    chunk: int = 16
    """Problems per sampling/checking round (``eval --chunk``; the seeds depend on it)."""
    memory_mb: int = 4096
    """Address-space limit (MiB) of each program the evaluation's sandbox runs (``eval --memory-mb``);
    at most the hard ``ulimit -v`` of the process that trains."""


@dataclass(frozen=True)
class TrackingConfig:
    """Where metrics go."""

    tensorboard: bool = True
    """Write TensorBoard event files."""
    wandb: bool = False
    """Log to Weights & Biases."""
    wandb_project: str = "codea1"
    """W&B project name."""
    samples_per_step: int = 8
    """Rollouts (with rewards) saved per step per role."""
    progress: Literal["auto", "rich", "plain"] = "auto"
    """Live progress display; auto = rich on a terminal, plain log lines otherwise."""


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs. Presets live in ``codea1/presets/*.yaml`` (package data).

    Frozen, as are its sections: a value checked by :func:`check_invariants` cannot change after the
    check. A changed configuration is a new one (:func:`with_values`, or ``dataclasses.replace`` of
    the ``RunConfig``), checked again when it is built.
    """

    data: DataConfig = field(default_factory=DataConfig)
    """Problems."""
    coder: CoderConfig = field(default_factory=CoderConfig)
    """Code LLM role."""
    tester: TesterConfig = field(default_factory=TesterConfig)
    """Test LLM role."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Rewards."""
    mistake_book: MistakeBookConfig = field(default_factory=MistakeBookConfig)
    """Mistake Book."""
    loss: LossConfig = field(default_factory=LossConfig)
    """Advantages and loss."""
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    """Sandbox."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """Engine and models."""
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    """Ray cluster layout (``engine.backend: ray``)."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Training run."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation inside the run (off unless ``eval.data`` is set)."""
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """Tracking."""
    preset: str = ""
    """Name of the preset this config was loaded from (filled in by the loader)."""

    def __post_init__(self) -> None:
        check_invariants(self)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (tuples become lists), suitable for YAML/JSON."""
        return _plain(dataclasses.asdict(self))


def with_values(cfg: RunConfig, values: Mapping[str, Any]) -> RunConfig:
    """A copy of ``cfg`` with ``values`` (dotted keys: ``engine.device``, ``coder.optim.lr``) set, its
    sections replaced along each key's path; the new configuration is checked again
    (:class:`ConfigError` when it cannot work)."""
    nested: dict[str, Any] = {}
    for key, value in values.items():
        node = nested
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return _replaced(cfg, nested)


def _replaced(obj: Any, changes: dict[str, Any]) -> Any:
    """``obj`` (a config dataclass) with ``changes`` applied, nested dicts into its sections."""
    names = {f.name for f in dataclasses.fields(obj)}
    unknown = sorted(set(changes) - names)
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r} in {type(obj).__name__}")
    fields = {k: _replaced(getattr(obj, k), v) if isinstance(v, dict) else v for k, v in changes.items()}
    return dataclasses.replace(obj, **fields)


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


# --------------------------------------------------------------------------------------------------
# Invariants
# --------------------------------------------------------------------------------------------------


VLLM_FUSED_PROJECTIONS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Projections vLLM loads into one fused layer (``qkv_proj``, ``gate_up_proj``) of Llama and Qwen2."""


def vllm_sync_errors(cfg: RunConfig) -> list[str]:
    """Why vLLM rollouts (``engine.rollout`` vllm, or auto) could not take this run's weight syncs.

    * ``adapters`` mode syncs only the adapted projections, and vLLM's layer-wise reload rebuilds a
      fused layer given part of its projections from uninitialised memory and copies all of it over
      the live weights (``vllm/model_executor/model_loader/reload/layerwise.py``): ``lora_targets``
      must hold all or none of each :data:`VLLM_FUSED_PROJECTIONS` group.
    * Ray ``colocate`` on GPUs in ``separate`` mode with more replicas than learner ranks: replicas
      ``0..L-1`` share the ranks' GPUs, so vLLM's NCCL transfer would put learner rank 0 and
      replica 0 on one device (NCCL needs one rank per device), and CUDA IPC cannot reach the
      replicas on GPUs of their own. ``split`` with a fraction of a GPU per actor lets Ray put two
      ranks of that NCCL group on one GPU.
    """
    e, c = cfg.engine, cfg.cluster
    if e.rollout == "transformers" or e.kind != "transformers":
        return []
    errors = []
    if e.mode == "adapters":
        targets = set(e.lora_targets)
        for group in VLLM_FUSED_PROJECTIONS:
            if targets & set(group) and not set(group) <= targets:
                errors.append(
                    f"engine.lora_targets adapts {', '.join(p for p in group if p in targets)} without "
                    f"{', '.join(p for p in group if p not in targets)}: vLLM fuses {'/'.join(group)} into "
                    "one layer and a sync of part of it overwrites the rest with uninitialised memory; "
                    "adapt the whole group or none of it, or set engine.rollout=transformers"
                )
    if e.backend != "ray" or c.gpus_per_worker <= 0 or e.mode != "separate":
        return errors
    if c.placement == "colocate" and c.rollout_replicas > c.learner_workers:
        errors.append(
            f"cluster.placement=colocate with cluster.rollout_replicas={c.rollout_replicas} > "
            f"cluster.learner_workers={c.learner_workers} on GPUs: vLLM's NCCL weight transfer would put "
            "learner rank 0 and replica 0 on one GPU, and CUDA IPC cannot reach replicas on GPUs of their "
            "own; use rollout_replicas <= learner_workers, placement=split or engine.rollout=transformers"
        )
    if c.placement == "split" and not float(c.gpus_per_worker).is_integer():
        errors.append(
            f"cluster.gpus_per_worker={c.gpus_per_worker:g} with placement=split: vLLM's NCCL weight "
            "transfer needs learner rank 0 and every replica on GPUs of their own, and Ray may put two "
            "of them on one GPU; use whole GPUs or engine.rollout=transformers"
        )
    return errors


def check_invariants(cfg: RunConfig) -> None:
    """Raise :class:`ConfigError` with a reason when the configuration cannot work."""
    errors: list[str] = []
    for role in ("coder", "tester"):
        s: SamplingConfig = getattr(cfg, role).sampling
        o: OptimConfig = getattr(cfg, role).optim
        if s.n < 2 and (role == "coder" or cfg.train.trains_tester):
            errors.append(
                f"{role}.sampling.n={s.n}: GRPO needs a group size >= 2 (advantages are 0 otherwise)"
            )
        if s.temperature <= 0:
            errors.append(f"{role}.sampling.temperature must be > 0 for sampling, got {s.temperature}")
        if not 0 < s.top_p <= 1:
            errors.append(f"{role}.sampling.top_p must be in (0, 1], got {s.top_p}")
        if s.max_new_tokens < 1 or s.batch_size < 1:
            errors.append(f"{role}.sampling.max_new_tokens and batch_size must be >= 1")
        if o.lr <= 0 or o.micro_batch_size < 1 or o.mini_batches < 1 or o.ppo_epochs < 1:
            errors.append(f"{role}.optim: lr > 0, micro_batch_size, mini_batches, ppo_epochs >= 1 required")
        if not 0 <= o.min_lr_ratio <= 1:
            errors.append(f"{role}.optim.min_lr_ratio must be in [0, 1], got {o.min_lr_ratio}")
        if o.micro_batch_tokens < 0:
            errors.append(f"{role}.optim.micro_batch_tokens must be >= 0, got {o.micro_batch_tokens}")
    if not 0 <= cfg.reward.alpha <= 1:
        errors.append(f"reward.alpha must be in [0, 1], got {cfg.reward.alpha}")
    if cfg.reward.n_norm < 1:
        errors.append(f"reward.n_norm must be >= 1, got {cfg.reward.n_norm}")
    for key in ("mutation_weight", "mutation_kinds_weight"):
        weight = getattr(cfg.reward, key)
        if not 0 <= weight < float("inf"):
            errors.append(f"reward.{key} must be a finite number >= 0, got {weight}")
        elif weight > 0 and not cfg.train.trains_tester:
            errors.append(
                f"reward.{key}={weight} rewards tests: train.method={cfg.train.method} has no Test LLM"
            )
    if cfg.reward.mutation_mutants < 1 or cfg.reward.mutation_seed < 0:
        errors.append("reward.mutation_mutants must be >= 1 and reward.mutation_seed >= 0")
    if not 0 <= cfg.tester.whitebox_share <= 1:
        errors.append(f"tester.whitebox_share must be in [0, 1], got {cfg.tester.whitebox_share}")
    elif cfg.tester.whitebox_share < 1 and cfg.tester.view != "whitebox":
        errors.append(
            f"tester.whitebox_share={cfg.tester.whitebox_share} needs tester.view=whitebox (a black-box "
            "tester never sees the code)"
        )
    if cfg.tester.update_n < 0 or cfg.tester.update_n > cfg.coder.sampling.n:
        errors.append(
            f"tester.update_n={cfg.tester.update_n} must be in [0, coder.sampling.n={cfg.coder.sampling.n}]"
        )
    if not (0 <= cfg.loss.clip_low < 1 and cfg.loss.clip_high >= 0):
        errors.append("loss.clip_low must be in [0, 1) and loss.clip_high >= 0")
    if cfg.loss.dual_clip and cfg.loss.dual_clip <= 1:
        errors.append(f"loss.dual_clip must be > 1 (or 0 to disable), got {cfg.loss.dual_clip}")
    if cfg.mistake_book.top_k < 0 or cfg.mistake_book.capacity_per_problem < 1:
        errors.append("mistake_book.top_k must be >= 0 and capacity_per_problem >= 1")
    if cfg.sandbox.test_cpu_s <= 0 or cfg.sandbox.load_cpu_s <= 0 or cfg.sandbox.memory_mb < 64:
        errors.append("sandbox budgets must be positive and memory_mb >= 64")
    if cfg.sandbox.workers < 0:
        errors.append(f"sandbox.workers must be >= 0 (0 = one per CPU core), got {cfg.sandbox.workers}")
    c = cfg.cluster
    if c.learner_workers < 1 or c.rollout_replicas < 1 or c.sandbox_batch < 1 or c.num_cpus < 0:
        errors.append(
            "cluster: learner_workers, rollout_replicas and sandbox_batch must be >= 1, num_cpus >= 0"
        )
    if c.gpus_per_worker < 0 or c.cpus_per_worker <= 0:
        errors.append("cluster: gpus_per_worker must be >= 0 and cpus_per_worker > 0")
    if cfg.engine.backend == "ray" and cfg.engine.kind == "scripted":
        errors.append("engine.backend=ray needs engine.kind=transformers (the scripted fake runs locally)")
    errors += vllm_sync_errors(cfg)
    if cfg.data.problems_per_step < 1 or cfg.train.steps < 1 or cfg.train.save_every < 1:
        errors.append("data.problems_per_step, train.steps and train.save_every must be >= 1")
    if cfg.train.keep_last < 1:
        errors.append("train.keep_last must be >= 1")
    if cfg.engine.vllm_kv_cache_gib < 0:
        errors.append(f"engine.vllm_kv_cache_gib must be >= 0, got {cfg.engine.vllm_kv_cache_gib}")
    if not 0 <= cfg.engine.cpu_mmap_threshold <= CPU_MMAP_THRESHOLD_MAX:
        errors.append(
            f"engine.cpu_mmap_threshold must be in [0, {CPU_MMAP_THRESHOLD_MAX}] bytes, "
            f"got {cfg.engine.cpu_mmap_threshold}"
        )
    elif cfg.engine.cpu_heap == "keep" and cfg.engine.cpu_mmap_threshold:
        errors.append(
            f"engine.cpu_heap=keep maps no block on its own, and engine.cpu_mmap_threshold is "
            f"{cfg.engine.cpu_mmap_threshold}: set engine.cpu_mmap_threshold=0 to keep, or "
            "engine.cpu_heap=return to map blocks"
        )
    if cfg.train.method == "selfplay" and cfg.tester.view != "blackbox":
        errors.append(
            "train.method=selfplay needs tester.view=blackbox (the baseline writes black-box tests)"
        )
    e = cfg.eval
    if e.data and (
        e.n < 1 or e.tests < 1 or e.max_new_tokens < 1 or e.chunk < 1 or e.every < 0 or e.limit < 0
    ):
        errors.append("eval: n, tests, max_new_tokens and chunk must be >= 1, every and limit >= 0")
    if e.data and not 64 <= e.memory_mb <= MAX_SANDBOX_MEMORY_MB:
        errors.append(f"eval.memory_mb must be in [64, {MAX_SANDBOX_MEMORY_MB}] MiB, got {e.memory_mb}")
    if e.data and (e.temperature <= 0 or not 0 < e.top_p <= 1):
        errors.append(f"eval: temperature must be > 0 and top_p in (0, 1], got {e.temperature}, {e.top_p}")
    if cfg.tester.tests_per_suite < 1:
        errors.append(f"tester.tests_per_suite must be >= 1, got {cfg.tester.tests_per_suite}")
    if cfg.eval.every < 0:
        errors.append(f"eval.every must be >= 0 (0 = only at step 0 and the last step), got {cfg.eval.every}")
    bounds = [*SIZE_BOUNDS, *(EVAL_SIZE_BOUNDS if cfg.eval.data else ())]
    too_large = size_errors({key: functools.reduce(getattr, key.split("."), cfg) for key in bounds})
    errors += too_large
    tester_n = cfg.tester.sampling.n if cfg.train.trains_tester else None
    many = completions_error(cfg.data.problems_per_step, cfg.coder.sampling.n, tester_n)
    if many and not too_large:
        errors.append(many)
    if errors:
        raise ConfigError("invalid configuration: " + "; ".join(errors))


# --------------------------------------------------------------------------------------------------
# Strict loading
# --------------------------------------------------------------------------------------------------

PRESET_DIR = Path(__file__).resolve().parent / "presets"
"""The presets, shipped inside the package (an installed wheel has them too)."""


def preset_names() -> list[str]:
    """Names of the shipped presets, sorted (``tiny-cpu``, ``paper-1.5b``, ...)."""
    return sorted(q.stem for q in PRESET_DIR.glob("*.yaml"))


def preset_path(name_or_path: str) -> Path:
    """Resolve a preset name (``tiny-cpu``) or a YAML path to a file."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml"):
        if not p.is_file():
            raise ConfigError(f"preset file {p} not found")
        return p
    cand = PRESET_DIR / f"{name_or_path}.yaml"
    if cand.is_file():
        return cand
    known = ", ".join(preset_names()) or "(none found)"
    raise ConfigError(f"unknown preset {name_or_path!r}; known presets: {known} (or give a YAML file)")


def _yaml_reason(e: yaml.YAMLError) -> str:
    """A YAML error as one line: what is wrong and where."""
    problem = getattr(e, "problem", None) or (str(e).splitlines() or ["unreadable"])[0]
    mark = getattr(e, "problem_mark", None)
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else problem


def read_mapping(path: Path) -> dict[str, Any]:
    """The YAML mapping of a configuration file (empty when the file is); :class:`ConfigError` naming
    the file when it is not UTF-8, not YAML or not a mapping."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_reason(e)}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return raw


def load_config(
    preset: str = "tiny-cpu", overrides: list[str] | None = None, *, labels: Mapping[str, str] | None = None
) -> RunConfig:
    """Load a preset and apply ``section.field=value`` overrides (values parsed as YAML).

    An error caused by an override names the override (``--set KEY=VALUE``, or its entry in
    ``labels``: how the user gave it, e.g. ``--steps 0``), not the preset, which is not at fault.
    """
    path = preset_path(preset)
    preset_raw = read_mapping(path)
    items = [(item, (labels or {}).get(item, f"--set {item}")) for item in overrides or []]
    raw, given = _overridden(preset_raw, items, path)
    try:
        return config_from_dict(raw, source=str(path), overridden=given)
    except InvalidConfiguration as e:
        if not given or _invalid_detail(preset_raw, [], path) is not None:
            raise  # the preset alone is invalid: it is named
        blamed = [label for key, label in given.items() if key in e.detail
                  and _invalid_detail(preset_raw, [i for i in items if _key(i[0]) != key], path) != e.detail]  # fmt: skip
        raise ConfigError(e.detail + (f" (from {', '.join(blamed)})" if blamed else "")) from None


def _key(item: str) -> str:
    return item.partition("=")[0].strip()


def _overridden(
    preset_raw: dict[str, Any], items: list[tuple[str, str]], path: Path
) -> tuple[dict[str, Any], dict[str, str]]:
    """A copy of the preset's mapping with the overrides ``(item, label)`` applied, and the label of
    each key they set."""
    raw = copy.deepcopy(preset_raw)
    given: dict[str, str] = {}
    for item, label in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{label}: an override must look like section.field=value")
        node = raw
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{label}: {part!r} is not a section")
        try:
            node[parts[-1]] = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise ConfigError(f"{label}: the value is not valid YAML: {_yaml_reason(e)}") from None
        given[key.strip()] = label
    raw.setdefault("preset", path.stem)
    return raw, given


def _invalid_detail(preset_raw: dict[str, Any], items: list[tuple[str, str]], path: Path) -> str | None:
    """Why the preset with these overrides is an invalid configuration (None when it is valid)."""
    try:
        raw, _ = _overridden(preset_raw, items, path)
        config_from_dict(raw, source=str(path))
    except InvalidConfiguration as e:
        return e.detail
    except ConfigError as e:
        return str(e)
    return None


class InvalidConfiguration(ConfigError):
    """The fields have the right types, but together they cannot work (:func:`check_invariants`)."""

    def __init__(self, source: str, detail: str) -> None:
        super().__init__(f"{source}: {detail}")
        self.detail = detail
        """The reason without the file name."""


def config_from_dict(
    raw: dict[str, Any], source: str = "<dict>", overridden: Mapping[str, str] | None = None
) -> RunConfig:
    """Build a :class:`RunConfig` from a nested dict, strictly (unknown keys and wrong types fail).

    ``overridden`` maps the keys an override set to its label: an error in such a key names the
    label instead of ``source``.
    """
    return _build(RunConfig, raw, prefix="", source=source, overridden=overridden or {})


def _label(key: str, overridden: Mapping[str, str]) -> str | None:
    """The label of the override that set ``key`` (or a section above it), if any."""
    for okey, label in overridden.items():
        if key == okey or key.startswith(okey + "."):
            return label
    return None


def _build(cls: type, raw: Any, prefix: str, source: str, overridden: Mapping[str, str]) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: {prefix.rstrip('.') or 'top level'} must be a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        key = f"{prefix}{unknown[0]}"
        raise ConfigError(
            f"{_label(key, overridden) or source}: unknown key '{key}'; valid keys in "
            f"{prefix.rstrip('.') or 'the top level'}: {', '.join(sorted(fields))}"
        )
    kwargs: dict[str, Any] = {}
    for name, value in raw.items():
        key = f"{prefix}{name}"
        src = _label(key, overridden) or source
        if dataclasses.is_dataclass(hints[name]):
            kwargs[name] = _build(hints[name], value, key + ".", src, overridden)
        else:
            kwargs[name] = _coerce(hints[name], value, key, src)
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise InvalidConfiguration(source, str(e)) from None


_YAML11_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _coerce(tp: Any, value: Any, key: str, source: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key + ".", source, {})
    if origin is Literal:
        choices = typing.get_args(tp)
        if value is None:  # `--set key=` or `key:` with nothing after it
            raise ConfigError(f"{source}: {key} is empty; give one of {', '.join(map(repr, choices))}")
        if value not in choices:
            raise ConfigError(f"{source}: {key}={value!r} is not one of {', '.join(map(repr, choices))}")
        return value
    if origin in (typing.Union, types.UnionType):
        errors = []
        for arg in typing.get_args(tp):
            try:
                return _coerce(arg, value, key, source)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{source}: {key}={value!r} has the wrong type ({tp})")
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{source}: {key} must be a list, got {type(value).__name__} {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], v, key, source) for v in value)
        if len(args) != len(value):
            raise ConfigError(f"{source}: {key} must have {len(args)} items, got {len(value)}")
        return tuple(_coerce(a, v, key, source) for a, v in zip(args, value, strict=True))
    if tp is type(None):
        if value is not None:
            raise ConfigError(f"{source}: {key} must be null")
        return None
    if tp is float:
        if isinstance(value, str) and _YAML11_EXPONENT.fullmatch(value.strip()):
            value = float(value)  # YAML 1.1 reads 1e-4 (no dot) as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{source}: {key} must be a number, got {_got(value)}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{source}: {key} must be an integer, got {_got(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: {key} must be true or false, got {_got(value)}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{source}: {key} must be a string, got {_got(value)}")
        return value
    return value


def _got(value: Any) -> str:
    """A wrong value as an error shows it: its type and value, or that it is empty (YAML's null,
    what ``--set key=`` gives)."""
    return "nothing (an empty value)" if value is None else f"{type(value).__name__} {value!r}"


def dump_config(cfg: RunConfig, path: Path) -> None:
    """Write the resolved configuration as YAML (atomically)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False), encoding="utf-8")
    tmp.replace(path)
