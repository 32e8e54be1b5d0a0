"""vLLM as an evaluation's sampler: one in-process CPU engine for a model that is not being trained.

``codea1 eval --engine vllm`` samples through this engine instead of transformers ``generate``:
continuous batching and a paged KV cache (as training rollouts, vLLM took 2.4–4.2× fewer seconds per
sampled token than transformers on a 2-core CPU: docs/LOG.md, 2026-12-05). The engine starts from the base model's files (vLLM reads the
checkpoint itself); a trained model's weights (a training checkpoint's role) are then sent in once,
through the weight-transfer path the trainer uses. Requests are seeded one by one
(:class:`~codea1.engine.vllm_local.policy.VLLMPolicy`), so a completion depends on the seed, the
prompt's index and the sample's index, not on batching. It is not the transformers engine's
completion for the same seed: an evaluation records which engine sampled it.

The context is fixed when the engine starts: :data:`EVAL_PROMPT_TOKENS` of prompt plus the new
tokens asked for (or less, the model's own limit). A longer prompt is refused before anything is
sampled (:class:`~codea1.engine.base.PromptTooLong`).

Imports: torch, transformers (config), config, engine.base, engine.loading, this package.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from codea1.config import EngineConfig, RunConfig, with_values
from codea1.engine.base import PromptTooLong, SamplingParams
from codea1.engine.loading import pick_device, pick_dtype
from codea1.engine.vllm_local.policy import VLLMPolicy, VLLMRollout
from codea1.engine.vllm_local.roles import VLLMStartError, start_engine

EVAL_PROMPT_TOKENS = 4096
"""The longest prompt an evaluation engine takes (its context holds this plus the new tokens)."""


class InferencePolicy(VLLMPolicy):
    """A :class:`VLLMPolicy` that refuses a prompt its engine's context cannot hold, before sampling."""

    def __init__(self, rollout: VLLMRollout, tokenizer: Any, eos_ids: Sequence[int], *, context: int) -> None:
        super().__init__(rollout, tokenizer, eos_ids, role="eval")
        self.context = context

    def encode(self, prompts: Sequence[str], params: SamplingParams) -> list[list[int]]:
        """The prompts' token ids; a prompt longer than the context allows with
        ``params.max_new_tokens`` is a :class:`PromptTooLong`, before anything is sampled."""
        encoded = super().encode(prompts, params)
        room = self.context - params.max_new_tokens
        for i, ids in enumerate(encoded):
            if len(ids) > room:
                raise PromptTooLong(
                    f"prompt {params.first_prompt + i} has {len(ids)} tokens; the vLLM evaluation engine "
                    f"holds {self.context} ({room} of prompt with {params.max_new_tokens} new tokens): "
                    "ask for fewer new tokens or sample with the transformers engine"
                )
        return encoded


def eval_run_config(engine: EngineConfig, *, context: int, max_new_tokens: int, batch_size: int) -> RunConfig:
    """The configuration an evaluation engine starts from: ``batch_size`` sequences of ``context``
    tokens, ``max_new_tokens`` of them new (``start_engine`` sizes the KV cache and the scheduler
    from these)."""
    values: dict[str, Any] = {"engine": engine}
    for role in ("coder", "tester"):
        values[f"{role}.sampling.max_new_tokens"] = max_new_tokens
        values[f"{role}.sampling.max_prompt_tokens"] = context - max_new_tokens
        values[f"{role}.sampling.batch_size"] = batch_size
    return with_values(RunConfig(), values)


def inference_policy(
    location: str,
    tokenizer: Any,
    eos_ids: Sequence[int],
    engine: EngineConfig,
    *,
    weights: Mapping[str, torch.Tensor] | None = None,
    max_new_tokens: int,
    batch_size: int,
    max_positions: int,
) -> InferencePolicy:
    """A vLLM policy for the model whose base files are at ``location`` (``weights``: the trained
    tensors under Hugging Face names, sent in after the start; ``None``: the base itself).

    The engine runs in this process on the CPU (``engine.device`` must resolve to it: a CUDA engine
    needs its GPU's memory plan, which only training builds); ``engine.dtype`` as for training;
    ``batch_size`` sequences at once; a context of :data:`EVAL_PROMPT_TOKENS` plus
    ``max_new_tokens``, at most ``max_positions`` (the model's). Raises :class:`VLLMStartError`.
    """
    device = pick_device(engine.device)
    if device.type != "cpu":
        raise VLLMStartError(
            f"the vLLM evaluation engine runs on the CPU only (device {device.type}); "
            "sample with the transformers engine on a GPU"
        )
    dtype = pick_dtype(engine.dtype, device)
    context = min(EVAL_PROMPT_TOKENS + max_new_tokens, max_positions)
    if context <= max_new_tokens:
        raise VLLMStartError(
            f"{max_new_tokens} new tokens leave no room for a prompt in the model's {max_positions}"
        )
    cfg = eval_run_config(engine, context=context, max_new_tokens=max_new_tokens, batch_size=batch_size)
    rollout = VLLMRollout(start_engine(cfg, location, dtype, in_process=True), in_process=True)
    if weights is not None:
        rollout.load_weights(weights)
    return InferencePolicy(rollout, tokenizer, eos_ids, context=context)
