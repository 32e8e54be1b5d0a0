"""The one place that turns a run configuration into the two roles' policies and learners.

``engine.kind`` picks the learner side (``transformers``, or the ``scripted`` fake) and
``engine.rollout`` the sampling side (``transformers`` generate or ``vllm``; ``auto`` is vLLM when
it imports, else transformers). Concrete engines are imported lazily, so a scripted run never loads
torch models and a transformers run never imports vLLM.

Imports: config, types, engine.base, engine.host_plan, engine.memory, engine (its leaves, lazily).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from codea1.config import EngineConfig, OptimConfig, RunConfig, TrainConfig
from codea1.engine.base import EngineFailure, Policy, Roles
from codea1.engine.host_plan import HostPlan, host_plan
from codea1.engine.memory import ModelShape
from codea1.types import Problem


class EngineBuildError(RuntimeError):
    """The engine could not be built (model not found, vLLM unusable, conflicting settings)."""


def optimizer_steps(cfg: RunConfig) -> int:
    """Optimizer steps of the coder's learner over the run (its lr schedule's length): the trainer
    calls ``train_step`` ``mini_batches × ppo_epochs`` times per training step."""
    return cfg.train.steps * cfg.coder.optim.mini_batches * cfg.coder.optim.ppo_epochs


def per_update(optim: OptimConfig) -> OptimConfig:
    """``optim`` with its warm-up counted in optimizer steps: the config counts training steps (the
    paper's scheduler steps once per training step), the learner counts ``train_step`` calls."""
    return dataclasses.replace(optim, warmup_steps=optim.warmup_steps * optim.mini_batches * optim.ppo_epochs)


def shares_one_model(train: TrainConfig) -> bool:
    """Self-play plays both roles with one model; golden has no Test LLM, so one model suffices."""
    return train.method in ("selfplay", "golden")


def rollout_engine(engine: EngineConfig) -> tuple[str, str]:
    """``(engine name, why)``: the sampling engine ``engine.rollout`` asks for, ``auto`` resolved
    (vLLM when it imports, else transformers; ``why`` says why vLLM was not taken)."""
    if engine.kind == "scripted":
        return "scripted", ""
    if engine.rollout != "auto":
        return engine.rollout, ""
    from codea1.engine.vllm_local.available import vllm_import_error

    error = vllm_import_error()
    return ("transformers", f"vLLM is not usable: {error}") if error else ("vllm", "")


def build(cfg: RunConfig, problems: Sequence[Problem] = (), *, rollout: str | None = None) -> Roles:
    """The :class:`~codea1.engine.base.Roles` of ``cfg``: ``coder_policy``, ``coder_learner``,
    ``tester_policy``, ``tester_learner`` (the same objects for both roles when one model plays
    both); the caller calls its ``close()`` when the run ends.

    ``problems`` feed the scripted engine's script; ``rollout`` overrides the resolved
    ``engine.rollout`` (see :func:`rollout_engine`). Raises :class:`EngineBuildError`.
    """
    shared = shares_one_model(cfg.train)
    if cfg.engine.kind == "scripted":
        from codea1.engine.scripted_roles import scripted_roles

        return scripted_roles(problems, seed=cfg.train.seed, shared=shared)
    sampler = rollout or rollout_engine(cfg.engine)[0]
    if cfg.engine.backend == "ray":
        return build_on_ray(cfg, sampler, shared)
    from codea1.engine.hf_local import build_roles
    from codea1.engine.loading import ModelLoadError

    try:
        roles = build_roles(
            cfg.engine, per_update(cfg.coder.optim), per_update(cfg.tester.optim), optimizer_steps(cfg),
            temperature_coder=cfg.coder.sampling.temperature,
            temperature_tester=cfg.tester.sampling.temperature, shared=shared, loss=cfg.loss,
            batch_size=cfg.coder.sampling.batch_size,
            # with vLLM sampling, the transformers side needs no merged rollout copy
            rollout="unmerged" if sampler == "vllm" else "merged", seed=cfg.train.seed,
        )  # fmt: skip
        if sampler == "vllm":
            from codea1.engine.vllm_local import VLLMStartError, attach_vllm

            try:
                roles = attach_vllm(roles, cfg, shared=shared)
            except VLLMStartError as e:
                raise EngineBuildError(str(e)) from None
    except (ModelLoadError, ValueError) as e:
        raise EngineBuildError(str(e)) from None
    return roles


def inference_policy(
    spec: str,
    engine: EngineConfig,
    *,
    sampler: str = "transformers",
    max_new_tokens: int,
    batch_size: int = 16,
) -> Policy:
    """A frozen policy of the model ``spec`` (any form ``--model`` takes: hub id, directory, GGUF
    file, ``smollm2-135m``, a training checkpoint's role directory) that samples with ``sampler``:
    ``transformers`` ``generate``, or ``vllm`` (:mod:`codea1.engine.vllm_local.inference`: an
    in-process CPU engine started from the base model's files, a checkpoint's trained weights sent
    in). ``batch_size`` prompts (transformers) or sequences (vLLM) at once. Raises
    :class:`EngineBuildError` (the model cannot be loaded, vLLM cannot start)."""
    from codea1.engine.hf_local import base_model_spec, load_policy
    from codea1.engine.loading import ModelLoadError, model_location

    try:
        policy = load_policy(spec, engine, batch_size)
        if sampler != "vllm":
            return policy
        base = base_model_spec(spec)
        location = model_location(base, engine.cache_dir)
    except (ModelLoadError, ValueError) as e:
        raise EngineBuildError(str(e)) from None
    from codea1.engine.vllm_local.available import vllm_import_error
    from codea1.engine.vllm_local.inference import inference_policy as vllm_policy
    from codea1.engine.vllm_local.roles import VLLMStartError

    if error := vllm_import_error():
        raise EngineBuildError(f"--engine vllm: {error}")
    model = policy.rollout.model
    trained = None if base == spec else dict(model.state_dict())
    try:
        return vllm_policy(
            location, policy.tokenizer, sorted(policy.eos_ids), engine, weights=trained,
            max_new_tokens=max_new_tokens, batch_size=batch_size,
            max_positions=int(getattr(model.config, "max_position_embeddings", 0) or 1 << 20),
        )  # fmt: skip
    except VLLMStartError as e:
        raise EngineBuildError(str(e)) from None


def expected_host_plan(cfg: RunConfig, sampler: str) -> HostPlan | None:
    """The host memory a local CPU run of ``cfg`` with ``sampler`` rollouts is expected to peak at
    (:mod:`codea1.engine.host_plan`, from the coder model's config); None for other runs (the Ray
    backend, CUDA, the scripted engine) or when the model's config cannot be read."""
    if cfg.engine.kind != "transformers" or cfg.engine.backend != "local":
        return None
    from transformers import AutoConfig

    from codea1.engine.loading import ModelLoadError, model_location, pick_device, pick_dtype

    try:
        device = pick_device(cfg.engine.device)
        if device.type != "cpu":
            return None
        location = model_location(cfg.engine.coder_model, cfg.engine.cache_dir)
        model = ModelShape.from_hf_config(AutoConfig.from_pretrained(location), location)
    except (ModelLoadError, OSError, ValueError):
        return None
    weight_bytes = pick_dtype(cfg.engine.dtype, device).itemsize
    return host_plan(
        cfg, model, weight_bytes=weight_bytes, rollout=sampler, one_model=shares_one_model(cfg.train)
    )


def build_on_ray(cfg: RunConfig, sampler: str, shared: bool) -> Roles:
    """The roles as Ray actors (``engine.backend: ray``, see ``engine/ray_cluster``)."""
    from codea1.engine.loading import ModelLoadError
    from codea1.engine.ray_cluster import RayUnavailable, build_ray_roles
    from codea1.engine.vllm_local.roles import VLLMStartError

    schedules = {
        "coder": (per_update(cfg.coder.optim), optimizer_steps(cfg)),
        "tester": (per_update(cfg.tester.optim), optimizer_steps(cfg)),
    }
    try:
        return build_ray_roles(cfg, rollout=sampler, shared=shared, schedules=schedules)
    except (RayUnavailable, EngineFailure, ModelLoadError, VLLMStartError, ValueError) as e:
        raise EngineBuildError(str(e)) from None
