"""Build the coder's and tester's policy and learner from the engine configuration.

``separate`` mode (the paper): each role owns a full model, its own AdamW, and a frozen reference
copy taken at start-up (only when ``keep_reference``, i.e. when the KL coefficient is non-zero).
``adapters`` mode: one frozen base with two LoRA adapters, ``coder`` and ``tester``; the reference
is the base with adapters disabled, and rollouts sample from a plain copy of the base holding the
merged weights of the role being sampled (``rollout="unmerged"`` samples through the adapter
layers instead, saving that copy's memory at a throughput cost). ``shared=True`` (the Self-Play
baseline) makes one model, policy and learner play both roles.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from codea1.config import EngineConfig, LossConfig, OptimConfig
from codea1.engine.base import Policy
from codea1.engine.hf_local.learner import WEIGHTS_FILE, HFLearner
from codea1.engine.hf_local.policy import HFPolicy
from codea1.engine.hf_local.weights import (
    AdapterWeights,
    FullWeights,
    MergedAdapterRollout,
    ModuleRollout,
    PeftRollout,
)
from codea1.engine.host_memory import keep_freed_memory, map_large_blocks
from codea1.engine.loading import ModelLoadError, load_model_and_tokenizer, pick_device
from codea1.engine.lora import base_weights


@dataclass
class LocalRoles:
    """The two roles' engines in this process (a :class:`~codea1.engine.base.Roles`). With
    ``shared`` the coder and tester attributes are the same objects. ``vllm_local.attach_vllm``
    swaps the policies for vLLM ones."""

    coder_policy: Policy
    """An :class:`HFPolicy`, or a ``VLLMPolicy`` once ``attach_vllm`` swapped it in."""
    coder_learner: HFLearner
    tester_policy: Policy
    tester_learner: HFLearner
    tokenizer: Any
    """The coder's tokenizer (the tester's is ``tester_policy.tokenizer``)."""
    updates_overlap: bool = False
    """Never: both roles compute on this process's device(s)."""

    def close(self) -> None:
        """Nothing to release: the models live in this process and go with it."""


def build_roles(
    engine_cfg: EngineConfig,
    coder_optim: OptimConfig,
    tester_optim: OptimConfig,
    total_steps: int,
    *,
    temperature_coder: float,
    temperature_tester: float,
    shared: bool = False,
    loss: LossConfig | None = None,
    batch_size: int = 16,
    rollout: Literal["merged", "unmerged"] = "merged",
    seed: int = 0,
) -> LocalRoles:
    """Load the model(s) named by ``engine_cfg`` and wire each role's policy and learner.

    ``total_steps`` is the number of optimizer steps of each learner (for the lr schedule).
    ``loss`` (default :class:`~codea1.config.LossConfig`) says whether a frozen reference is kept
    (KL on), how micro-batch stats are weighted and whether per-token entropy is computed (see
    :meth:`HFLearner.from_config`); ``batch_size`` is the default generation batch; ``rollout``
    applies to adapters mode;
    ``seed`` draws the LoRA adapters' initial weights (the same in every process that builds them).
    """
    if shared and temperature_coder != temperature_tester:
        raise ValueError("shared=True needs one sampling temperature for both roles (the learner is shared)")
    loss = loss or LossConfig()
    keep_reference = loss.keeps_reference
    tester_spec = engine_cfg.role_model("tester")
    model, tok = load_trainable(engine_cfg, engine_cfg.role_model("coder"))

    def learner(weights: Any, optim: OptimConfig, temperature: float, tokenizer: Any) -> HFLearner:
        pad_id = tokenizer.pad_token_id
        return HFLearner.from_config(
            weights, optim, total_steps, engine_cfg, loss, temperature=temperature, pad_id=pad_id
        )

    def policy(model: Any, trained: HFLearner, tokenizer: Any, role: str) -> HFPolicy:
        # the policy reads its eos ids before it samples; then, where the learner keeps fp32 master
        # weights of a bf16 run (CUDA), it samples from a bf16 copy of them (ModuleRollout)
        made = HFPolicy(ModuleRollout(model), tokenizer, batch_size, role)
        made.rollout.sample_dtype = trained.compute_dtype
        return made

    if engine_cfg.mode == "separate":
        coder_w = FullWeights(model, keep_reference)
        coder_learner = learner(coder_w, coder_optim, temperature_coder, tok)
        coder = (policy(model, coder_learner, tok, "coder"), coder_learner)
        if shared:
            return LocalRoles(coder[0], coder[1], coder[0], coder[1], tok)
        if tester_spec == engine_cfg.coder_model:  # same start: the roles share one frozen reference
            tester_model, tester_tok = copy.deepcopy(model), tok
            tester_w = FullWeights(tester_model, keep_reference, reference=coder_w.reference)
        else:
            tester_model, tester_tok = load_trainable(engine_cfg, tester_spec)
            tester_w = FullWeights(tester_model, keep_reference)
        tester_learner = learner(tester_w, tester_optim, temperature_tester, tester_tok)
        tester = (policy(tester_model, tester_learner, tester_tok, "tester"), tester_learner)
        return LocalRoles(coder[0], coder[1], tester[0], tester[1], tok)

    if tester_spec != engine_cfg.coder_model:
        raise ValueError(
            f"engine.mode=adapters shares one base model, but coder_model={engine_cfg.coder_model!r} and "
            f"tester_model={tester_spec!r} differ; use engine.mode=separate"
        )
    plain = copy.deepcopy(model).requires_grad_(False) if rollout == "merged" else None
    peft_model = with_adapters(model, engine_cfg, ["coder"] if shared else ["coder", "tester"], seed=seed)
    sampler: Any = (
        PeftRollout(peft_model)
        if plain is None
        else MergedAdapterRollout(plain, base_weights(peft_model), engine_cfg.lora_scale)
    )
    coder_w = AdapterWeights(peft_model, "coder")
    coder = (
        HFPolicy(sampler, tok, batch_size, "coder"),
        learner(coder_w, coder_optim, temperature_coder, tok),
    )
    if shared:
        return LocalRoles(coder[0], coder[1], coder[0], coder[1], tok)
    tester_w = AdapterWeights(peft_model, "tester")
    tester = (
        HFPolicy(sampler, tok, batch_size, "tester"),
        learner(tester_w, tester_optim, temperature_tester, tok),
    )
    return LocalRoles(coder[0], coder[1], tester[0], tester[1], tok)


def set_host_heap(engine_cfg: EngineConfig) -> None:
    """What the process does with the host memory it frees: kept for reuse when it trains on the CPU
    (``engine.cpu_heap: keep``), or large blocks mapped on their own when
    ``engine.cpu_mmap_threshold`` asks for it."""
    if engine_cfg.cpu_heap == "keep":
        if pick_device(engine_cfg.device).type == "cpu":
            keep_freed_memory()
    elif engine_cfg.cpu_mmap_threshold:
        map_large_blocks(engine_cfg.cpu_mmap_threshold)


def load_trainable(engine_cfg: EngineConfig, spec: str) -> tuple[Any, Any]:
    """The model (gradient checkpointing as configured) and tokenizer of ``spec``; first
    :func:`set_host_heap`."""
    set_host_heap(engine_cfg)
    model, tok = load_model_and_tokenizer(spec, engine_cfg.dtype, engine_cfg.device, engine_cfg.cache_dir)
    if engine_cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, tok


def with_adapters(model: Any, engine_cfg: EngineConfig, names: list[str], seed: int = 0) -> Any:
    """``model`` frozen and wrapped as a peft model with one LoRA adapter per name (eval mode); the
    adapters' initial weights are drawn from ``seed`` (the global RNG is left untouched)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=engine_cfg.lora_r,
        lora_alpha=engine_cfg.lora_alpha,
        lora_dropout=engine_cfg.lora_dropout,
        target_modules=list(engine_cfg.lora_targets),
        task_type="CAUSAL_LM",
    )
    model.requires_grad_(False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft_model = get_peft_model(model, config, adapter_name=names[0])
        for name in names[1:]:
            peft_model.add_adapter(name, config)
    peft_model.eval()
    return peft_model


def load_policy(model_spec: str, engine_cfg: EngineConfig, batch_size: int = 16) -> HFPolicy:
    """An inference-only policy (evaluation): the model named by ``model_spec``, frozen, in eval mode.

    ``model_spec`` takes every form :func:`~codea1.engine.loading.resolve_model` accepts (hub id,
    directory, GGUF file, ``smollm2-135m``), or a role directory of a training checkpoint
    (``RUN_DIR/checkpoints/step_000010/coder``): its base model and holding mode come from the
    checkpoint's ``config.yaml``, and the trained weights (full, or a LoRA adapter merged into the
    base) are loaded on top.
    """
    role_dir = Path(model_spec)
    if is_checkpoint_role(role_dir):
        return _load_checkpoint_policy(role_dir, engine_cfg, batch_size)
    model, tok = load_model_and_tokenizer(
        model_spec, engine_cfg.dtype, engine_cfg.device, engine_cfg.cache_dir
    )
    model.requires_grad_(False).eval()
    return HFPolicy(ModuleRollout(model), tok, batch_size)


def base_model_spec(model_spec: str) -> str:
    """The model ``model_spec`` starts from: a checkpoint role directory's base model (its
    ``config.yaml``'s), else ``model_spec`` itself. Raises :class:`ModelLoadError`."""
    role_dir = Path(model_spec)
    if not is_checkpoint_role(role_dir):
        return model_spec
    return trained_engine(role_dir).role_model(role_dir.name)


def trained_engine(role_dir: Path) -> EngineConfig:
    """The engine configuration a checkpoint's role directory was trained with (its
    ``config.yaml``, one level up). Raises :class:`ModelLoadError`."""
    from codea1.config import ConfigError, load_config

    try:
        return load_config(str(role_dir.parent / "config.yaml")).engine
    except ConfigError as e:
        raise ModelLoadError(f"{role_dir}: cannot read the checkpoint's config.yaml: {e}") from None


def is_checkpoint_role(path: Path) -> bool:
    """Whether ``path`` is a role directory of a training checkpoint (its trained weights beside
    the checkpoint's ``config.yaml`` one level up), which :func:`load_policy` loads."""
    return (path / WEIGHTS_FILE).is_file() and (path.parent / "config.yaml").is_file()


def _load_checkpoint_policy(role_dir: Path, engine_cfg: EngineConfig, batch_size: int) -> HFPolicy:
    model, tok, _ = load_checkpoint_model(role_dir, engine_cfg)
    model.requires_grad_(False).eval()
    return HFPolicy(ModuleRollout(model), tok, batch_size)


def load_checkpoint_model(
    role_dir: Path, engine_cfg: EngineConfig, *, merge: bool = True
) -> tuple[Any, Any, EngineConfig]:
    """``(model, tokenizer, trained engine config)`` of a checkpoint's role directory.

    The base model named by the checkpoint's ``config.yaml`` is loaded with ``engine_cfg``'s dtype,
    device and cache, and the trained weights are copied in: the full weights (``separate`` mode), or
    the role's LoRA adapter (``adapters`` mode), merged into the base unless ``merge=False`` (then
    the model is a peft model whose only adapter is named after the role).
    """
    from safetensors.torch import load_file

    role_dir = Path(role_dir)
    trained = trained_engine(role_dir)
    role = role_dir.name
    base = trained.role_model(role)
    model, tok = load_model_and_tokenizer(base, engine_cfg.dtype, engine_cfg.device, engine_cfg.cache_dir)
    tensors = load_file(str(role_dir / WEIGHTS_FILE))
    if trained.mode == "adapters":
        model = with_adapters(model, trained, [role])
    params = dict(model.named_parameters())
    unknown = sorted(set(tensors) - set(params))
    if unknown:
        raise ModelLoadError(
            f"{role_dir / WEIGHTS_FILE} does not fit base model {base!r} ({len(unknown)} unknown tensors, "
            f"e.g. {unknown[0]})"
        )
    with torch.no_grad():
        for name, value in tensors.items():
            params[name].copy_(value.to(params[name].device, params[name].dtype))
    if trained.mode == "adapters" and merge:
        model = model.merge_and_unload()
    return model, tok, trained
