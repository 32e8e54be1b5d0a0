"""The engine seam: what the trainer and evaluation need from a model runtime, as Protocols.

A ``Policy`` samples completions; a ``Learner`` computes log-probs and applies updates with a loss
function supplied by the caller (from ``codea1.core.losses``), so every engine trains the same
objective. ``engine.build`` returns the run's :class:`Roles`: each role's policy and learner, and
``close()``. Weights move from a learner to a policy only through the trainer:
``learner.named_weights()`` → ``policy.load_weights(...)`` (full weights) or
``policy.load_adapter(learner.adapter, ...)`` (one role's LoRA tensors), see :func:`push_weights`.
A :class:`TrainBatch` is cut (mini-batches, micro-batches, data-parallel shares) only with
:meth:`TrainBatch.slice` and joined only with :meth:`TrainBatch.concat`.
Concrete engines (``hf_local``, ``vllm_local``, ``scripted``) are leaves built by ``engine.build``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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

    def __len__(self) -> int:
        return len(self.completion_ids)

    def slice(self, start: int, stop: int) -> TrainBatch:
        """Sequences ``start:stop`` (list-slice semantics: past the end is empty), every
        per-sequence field cut alike."""
        lo, hi = int(start), int(stop)

        def cut(values: list | None) -> list | None:
            return None if values is None else values[lo:hi]

        return TrainBatch(
            self.prompt_ids[lo:hi], self.completion_ids[lo:hi], self.advantages[lo:hi],
            cut(self.old_logprobs), cut(self.ref_logprobs),
        )  # fmt: skip

    @classmethod
    def concat(cls, batches: Sequence[TrainBatch]) -> TrainBatch:
        """The batches' sequences one after the other. An optional field is kept when every batch
        has it and None when none has; a mix raises ``ValueError``."""

        def join(name: str) -> list | None:
            values = [getattr(b, name) for b in batches]
            if all(v is None for v in values):
                return None
            if any(v is None for v in values):
                raise ValueError(f"TrainBatch.concat: {name} is set on some batches only")
            return [x for v in values for x in v]

        return cls(
            [p for b in batches for p in b.prompt_ids], [c for b in batches for c in b.completion_ids],
            [a for b in batches for a in b.advantages], join("old_logprobs"), join("ref_logprobs"),
        )  # fmt: skip


LossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]
"""``loss_fn(logprobs, old_logprobs, ref_logprobs, advantages, mask, entropy=None, *, normalizer=None)
-> (loss, stats)``; all tensors are ``[batch, response_len]`` except ``advantages`` ``[batch]``.
``normalizer`` (a ``codea1.core.losses.LossNormalizer``) holds the counts of the whole mini-batch
across micro-batches and data-parallel ranks; the returned loss is then this slice's share of the
mini-batch loss (shares add up). A learner that cuts the batch must pass it."""


class EngineFailure(RuntimeError):
    """A remote part of the engine (an actor of the Ray backend) failed; the step cannot finish.
    The run's last checkpoint is intact and ``--resume`` continues from it."""


class PromptTooLong(ValueError):
    """A prompt does not fit the context of the engine asked to sample it: the input's fault, said
    before anything is sampled."""


class Policy(Protocol):
    """Samples completions for chat-formatted prompts."""

    name: str
    """The sampling engine (``transformers``, ``vllm``, ``scripted``), logged as ``rollout/engine/<name>``."""

    last_stats: dict[str, float]
    """What the latest :meth:`generate` measured (``sequences``, ``new_tokens``, ``seconds``, and
    ``tokens_per_s`` where the engine times it); empty before the first call."""

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
        """The trainable tensors by name, detached (full weights under Hugging Face names, or the
        adapter's LoRA tensors under peft names); a learner may hand them in its rollout dtype
        (the Ray learner groups: bf16 copies of fp32 masters)."""
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


class Roles(Protocol):
    """The run's two roles as :func:`codea1.engine.build.build` made them: each role's policy
    (samples) and learner (trains). When one model plays both roles (self-play, golden) the tester's
    policy and learner are the coder's objects."""

    @property
    def coder_policy(self) -> Policy: ...

    @property
    def coder_learner(self) -> Learner: ...

    @property
    def tester_policy(self) -> Policy: ...

    @property
    def tester_learner(self) -> Learner: ...

    @property
    def updates_overlap(self) -> bool:
        """Whether the two roles train and sync on devices of their own (the Ray backend's ``split``
        placement with two learner groups), so the trainer may update and push both at once; False
        when they share devices or one model plays both roles."""
        ...

    def close(self) -> None:
        """Release what the engine holds outside this process (the Ray backend's actors and
        placement group); a no-op for engines living in this process. Called once, at the end."""
        ...
