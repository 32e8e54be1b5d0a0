"""How one role's weights are held: a full model of its own, or a LoRA adapter on a shared base.

Both holders answer the same questions for the learner and the policy: which module to train,
which parameters are trainable, which module is the frozen reference, and which module to sample
from. ``FullWeights`` is the paper's ``separate`` mode (the rollout model *is* the trained module);
``AdapterWeights`` is the ``adapters`` mode (one frozen base, the reference is the base with
adapters disabled, rollouts use a plain copy holding ``base + ΔW`` of the role's adapter).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch


class FullWeights:
    """A whole model trained by one role; ``reference`` is a frozen copy taken before any update."""

    def __init__(self, model: Any, keep_reference: bool) -> None:
        self.model = model
        self.reference = _frozen_copy(model) if keep_reference else None

    def train_model(self) -> Any:
        """The causal LM to run with gradients."""
        return self.model

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        """Trainable parameters by name (tied weights appear once)."""
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad}

    @contextlib.contextmanager
    def reference_model(self) -> Iterator[Any]:
        """The frozen reference causal LM."""
        if self.reference is None:
            raise RuntimeError("no reference model was kept (build_roles(..., keep_reference=False))")
        yield self.reference

    def rollout_model(self) -> Any:
        """The module to sample from: the trained module itself."""
        return self.model

    def push(self) -> None:
        """Nothing to copy: rollouts already read the trained module."""


class MergedRolloutCopy:
    """A plain (non-peft) copy of the base model that holds ``base + ΔW(adapter)`` for sampling.

    One copy serves every adapter; it is rewritten when a different adapter or a newer version of
    the same adapter is requested.
    """

    def __init__(self, plain_base: Any) -> None:
        self.model = plain_base
        self.loaded: tuple[str, int] | None = None

    def refresh(self, peft_model: Any, adapter: str, version: int) -> Any:
        """Write the merged weights of ``adapter`` (if stale) and return the plain model."""
        from peft.tuners.lora import LoraLayer

        if self.loaded == (adapter, version):
            return self.model
        with torch.no_grad():
            for name, module in peft_model.get_base_model().named_modules():
                if isinstance(module, LoraLayer) and adapter in module.lora_A:
                    target = self.model.get_submodule(name)
                    delta = module.get_delta_weight(adapter).to(target.weight.dtype)
                    target.weight.copy_(module.get_base_layer().weight + delta)
        self.loaded = (adapter, version)
        return self.model


class AdapterWeights:
    """One LoRA adapter of a shared peft model; ``unmerged`` samples through the adapter layers."""

    def __init__(self, peft_model: Any, adapter: str, rollout: MergedRolloutCopy | None) -> None:
        self.peft_model = peft_model
        self.adapter = adapter
        self.rollout = rollout
        self.version = 0

    def train_model(self) -> Any:
        """The causal LM with this role's adapter active (peft marks only it trainable)."""
        self.peft_model.set_adapter(self.adapter)
        return self.peft_model.get_base_model()

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        """This adapter's LoRA parameters by name."""
        marker = f".{self.adapter}."
        return {n: p for n, p in self.peft_model.named_parameters() if "lora_" in n and marker in n}

    @contextlib.contextmanager
    def reference_model(self) -> Iterator[Any]:
        """The base model with every adapter disabled."""
        with self.peft_model.disable_adapter():
            yield self.peft_model.get_base_model()

    def rollout_model(self) -> Any:
        """The merged copy (refreshed if stale) or, unmerged, the peft model with this adapter active."""
        if self.rollout is not None:
            return self.rollout.refresh(self.peft_model, self.adapter, self.version)
        self.peft_model.set_adapter(self.adapter)
        return self.peft_model

    def push(self) -> None:
        """Mark the merged rollout weights stale; the next rollout rewrites them."""
        self.version += 1


def _frozen_copy(model: Any) -> Any:
    ref = copy.deepcopy(model)
    ref.requires_grad_(False)
    ref.eval()
    return ref
