"""The engine seam: what the trainer and evaluation need from a model runtime, as Protocols.

A ``Policy`` samples completions; a ``Learner`` computes log-probs and applies updates with a loss
function supplied by the caller (from ``codea1.core.losses``), so every engine trains the same
objective. Weights move from a learner to a policy only through the trainer:
``learner.named_weights()`` → ``policy.load_weights(...)`` (full weights) or
``policy.load_adapter(learner.adapter, ...)`` (one role's LoRA tensors), see :func:`push_weights`.
Concrete engines (``hf_local``, ``vllm_local``, ``scripted``) are leaves built by ``engine.build``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: ``n`` completions per prompt."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 256
    seed: int | None = None
    batch_size: int = 0
    """Sequences generated together in one batch (0 = the engine's default)."""
    first_prompt: int = 0
    """Index of this call's first prompt in the whole request, when a request is split across
    rollout replicas: per-request seeds use the whole request's prompt index."""


@dataclass(frozen=True)
class Completion:
    """One sampled completion with the token ids and per-token log-probs of the sampling policy.

    ``prompt_ids`` and ``completion_ids`` are unpadded; ``logprobs[i]`` is the sampling
    log-probability of ``completion_ids[i]`` (temperature applied as used for sampling).
    ``finished`` is False when ``max_new_tokens`` cut the completion.
    """

    prompt_index: int
    text: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finished: bool = True


@dataclass
class TrainBatch:
    """Sequences of one role to update on, with one scalar advantage per sequence.

    ``old_logprobs`` are the log-probs of the policy that sampled (recomputed by the learner
    before the update; None: the learner's current weights', taken from the update's own forward
    pass); ``ref_logprobs`` come from the frozen reference (None when KL is off).
    """

    prompt_ids: list[tuple[int, ...]]
    completion_ids: list[tuple[int, ...]]
    advantages: list[float]
    old_logprobs: list[tuple[float, ...]] | None = None
    ref_logprobs: list[tuple[float, ...]] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.completion_ids)


LossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]
"""``loss_fn(logprobs, old_logprobs, ref_logprobs, advantages, mask, entropy=None, *, normalizer=None)
-> (loss, stats)``; all tensors are ``[batch, response_len]`` except ``advantages`` ``[batch]``.
``normalizer`` (a ``codea1.core.losses.LossNormalizer``) holds the counts of the whole mini-batch
across micro-batches and data-parallel ranks; the returned loss is then this slice's share of the
mini-batch loss (shares add up). A learner that cuts the batch must pass it."""


class EngineFailure(RuntimeError):
    """A remote part of the engine (an actor of the Ray backend) failed; the step cannot finish.
    The run's last checkpoint is intact and ``--resume`` continues from it."""


class Policy(Protocol):
    """Samples completions for chat-formatted prompts."""

    def render(self, messages: Sequence[dict[str, str]]) -> str:
        """Apply the model's chat template to a message list and return the prompt text."""
        ...

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        """Sample ``params.n`` completions for each prompt (ordered prompt-major)."""
        ...

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` under this policy's tokenizer."""
        ...

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Sample from these full-model weights from now on (Hugging Face names; a subset updates
        only the tensors named). Tensors that already are the policy's own are not copied."""
        ...

    def load_adapter(self, role: str, weights: Mapping[str, torch.Tensor]) -> None:
        """Sample ``role`` from the base plus these LoRA tensors (peft names) from now on."""
        ...


class ChatTemplatePrompts:
    """``render`` and ``count_tokens`` with a Hugging Face tokenizer (``self.tokenizer``): the prompt
    side shared by the policies of the real engines."""

    tokenizer: Any

    def render(self, messages: Sequence[dict[str, str]]) -> str:
        """Apply the chat template (with the generation prompt) and return the prompt text."""
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` (no special tokens added: the template already has them)."""
        return len(self.tokenizer(text, add_special_tokens=False).input_ids)


class Learner(Protocol):
    """Scores and updates one role's trainable weights."""

    def logprobs(self, batch: TrainBatch, reference: bool = False) -> list[tuple[float, ...]]:
        """Per-token log-probs of the completions (of the frozen reference when ``reference``)."""
        ...

    def train_step(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        """One optimisation step over ``batch`` (micro-batched, gradients accumulated)."""
        ...

    adapter: str | None
    """The LoRA adapter this learner trains, or None when it trains full weights."""

    def named_weights(self) -> dict[str, torch.Tensor]:
        """The trainable tensors by name, detached and not copied (full weights under Hugging Face
        names, or the adapter's LoRA tensors under peft names)."""
        ...

    def save(self, path: Path) -> None:
        """Save trainable weights and optimizer/scheduler state under ``path``."""
        ...

    def load(self, path: Path) -> None:
        """Restore what :meth:`save` wrote."""
        ...


def push_weights(learner: Learner, policy: Policy) -> None:
    """Make ``policy`` sample from ``learner``'s current weights: full weights through
    :meth:`Policy.load_weights`, an adapter's tensors through :meth:`Policy.load_adapter`."""
    weights = learner.named_weights()
    if learner.adapter is None:
        policy.load_weights(weights)
    else:
        policy.load_adapter(learner.adapter, weights)
