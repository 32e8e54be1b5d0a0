"""How one role's weights are held by the learner, and what the policy samples from.

Learner side: ``FullWeights`` is the paper's ``separate`` mode (a whole model per role, a frozen
reference copy); ``AdapterWeights`` is the ``adapters`` mode (one frozen base, the reference is the
base with adapters disabled). Rollout side: ``ModuleRollout`` samples from a plain module (in
``separate`` mode the trained module itself, so a weight push copies nothing),
``MergedAdapterRollout`` from a plain copy holding ``base + ΔW`` of one role at a time, and
``PeftRollout`` through the adapter layers. Weights reach the rollout side only through the
policy's ``load_weights`` / ``load_adapter``, called by the trainer.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from codea1.engine.lora import lora_deltas, merged_weights


class FullWeights:
    """A whole model trained by one role; ``reference`` is a frozen copy taken before any update, or
    the given ``reference`` (one frozen copy can serve two roles that start from the same weights).
    With ``reference_dtype`` the copy's parameters are made in that dtype directly (fp32 master
    weights with a bf16 reference, as the learner ranks shard them), never as a second full copy in
    the weights' own dtype."""

    def __init__(
        self,
        model: Any,
        keep_reference: bool,
        reference: Any = None,
        reference_dtype: torch.dtype | None = None,
    ) -> None:
        self.model = model
        if not keep_reference:
            reference = None
        elif reference is None:
            reference = _frozen_copy(model, reference_dtype)
        self.reference = reference

    def train_model(self) -> Any:
        """The causal LM to run with gradients."""
        return self.model

    def owner(self) -> Any:
        """The module whose parameter names :meth:`trainable` uses."""
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


class AdapterWeights:
    """One LoRA adapter of a shared peft model (the learner's side of ``adapters`` mode)."""

    def __init__(self, peft_model: Any, adapter: str) -> None:
        self.peft_model = peft_model
        self.adapter = adapter

    def train_model(self) -> Any:
        """The causal LM with this role's adapter active (peft marks only it trainable)."""
        self.peft_model.set_adapter(self.adapter)
        return self.peft_model.get_base_model()

    def owner(self) -> Any:
        """The module whose parameter names :meth:`trainable` uses (the peft model)."""
        return self.peft_model

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        """This adapter's LoRA parameters by name."""
        marker = f".{self.adapter}."
        return {n: p for n, p in self.peft_model.named_parameters() if "lora_" in n and marker in n}

    @contextlib.contextmanager
    def reference_model(self) -> Iterator[Any]:
        """The base model with every adapter disabled.

        peft's ``disable_adapter`` also marks the adapters frozen; this adapter's parameters are
        marked trainable again inside it (a disabled adapter takes no part in the forward, so the
        flag changes nothing there). FSDP2 reads the flag at its first forward to choose the
        gradient reduce dtype: a first forward that is the reference's would otherwise reduce this
        adapter's gradients in bf16 onto its fp32 masters (a RuntimeError at the first backward)."""
        trainable = list(self.trainable().values())
        with self.peft_model.disable_adapter():
            for p in trainable:
                p.requires_grad_(True)
            yield self.peft_model.get_base_model()


# ---- the rollout side: what a policy samples from, and how weights reach it -------------------------


class ModuleRollout:
    """Samples from one plain causal LM: in ``separate`` mode the trained module itself (so loading
    the learner's own tensors copies nothing), in evaluation a frozen model.

    ``sample_dtype``: the dtype to sample in when the module trains in another (the local learner's
    fp32 master weights of a bf16 run on CUDA, ``HFLearner.compute_dtype``): each :meth:`model_for`
    then gives a frozen copy in that dtype, made for the call and freed with it, so ``generate``
    computes and keeps its KV cache in bf16 rather than fp32 (the copy is the size autocast's weight
    cache would be; ``memory.transformers_rollout_bytes`` plans both)."""

    def __init__(self, model: Any, sample_dtype: torch.dtype | None = None) -> None:
        self.model = model
        self.sample_dtype = sample_dtype

    def model_for(self, role: str) -> Any:
        """The module to sample from: the module itself, or its copy in ``sample_dtype``."""
        del role
        dtype = next(self.model.parameters()).dtype
        if self.sample_dtype is None or dtype == self.sample_dtype:
            return self.model
        return _frozen_copy(self.model, self.sample_dtype)

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Copy ``weights`` into the module (tensors that are already its own are skipped)."""
        copy_into(self.model, weights)

    def load_adapter(self, role: str, weights: Mapping[str, torch.Tensor]) -> None:
        """A plain module has no adapters."""
        raise TypeError(f"this policy holds full weights; use load_weights, not load_adapter({role!r})")


class MergedAdapterRollout:
    """A plain (non-peft) copy of the base that holds ``base + ΔW`` of one adapter at a time.

    One copy serves every role: :meth:`load_adapter` keeps a snapshot of a role's LoRA tensors and
    :meth:`model_for` rewrites the adapted modules when another role, or a newer snapshot of the
    same role, is asked for. ``base`` holds the frozen base weights (views into the learner's peft
    model, no copy).
    """

    def __init__(self, plain_base: Any, base: Mapping[str, torch.Tensor], scale: float) -> None:
        self.model = plain_base
        self.base = base
        self.scale = scale
        self.adapters: dict[str, dict[str, torch.Tensor]] = {}
        self.versions: dict[str, int] = {}
        self.loaded: tuple[str, int] | None = None

    def load_adapter(self, role: str, weights: Mapping[str, torch.Tensor]) -> None:
        """Keep a snapshot of ``role``'s LoRA tensors; the merge happens at its next rollout."""
        self.adapters[role] = {n: t.detach().clone() for n, t in weights.items()}
        self.versions[role] = self.versions.get(role, 0) + 1

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """The base is frozen in ``adapters`` mode."""
        raise TypeError("this policy samples LoRA adapters on a frozen base; use load_adapter")

    def model_for(self, role: str) -> Any:
        """The plain model holding ``role``'s merged weights (the base until its first load)."""
        state = (role, self.versions.get(role, 0))
        if self.loaded == state:
            return self.model
        if role in self.adapters:
            merged = merged_weights(self.base, self.adapters[role], role, self.scale)
        else:
            merged = {n: self.base[n] for n in self.loaded_names()}
        copy_into(self.model, merged)
        self.loaded = state
        return self.model

    def loaded_names(self) -> set[str]:
        """Names of the weights any adapter snapshot changes (what a switch back to the base restores)."""
        return {n for role, w in self.adapters.items() for n in lora_deltas(w, role, 1.0)}


class PeftRollout:
    """Samples through the peft model's adapter layers (``rollout="unmerged"``): no extra copy."""

    def __init__(self, peft_model: Any) -> None:
        self.peft_model = peft_model

    def model_for(self, role: str) -> Any:
        """The peft model with ``role``'s adapter active."""
        self.peft_model.set_adapter(role)
        return self.peft_model

    def load_adapter(self, role: str, weights: Mapping[str, torch.Tensor]) -> None:
        """Copy the LoRA tensors into the peft model (the learner's own tensors are skipped)."""
        copy_into(self.peft_model, weights)

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """The base is frozen in ``adapters`` mode."""
        raise TypeError("this policy samples LoRA adapters on a frozen base; use load_adapter")


def copy_into(model: Any, weights: Mapping[str, torch.Tensor]) -> int:
    """Copy ``weights`` into ``model``'s parameters by name; returns how many were copied.

    A tensor that shares storage with the parameter it names is skipped: when the policy samples
    from the learner's own module, a push copies nothing. An unknown name is an error.
    """
    params = dict(model.named_parameters())
    copied = 0
    with torch.no_grad():
        for name, value in weights.items():
            target = params.get(name)
            if target is None:
                raise KeyError(f"the rollout model has no parameter {name!r}")
            if target.data_ptr() == value.data_ptr() and target.shape == value.shape:
                continue
            target.copy_(value.to(target.device, target.dtype))
            copied += 1
    return copied


def _frozen_copy(model: Any, dtype: torch.dtype | None = None) -> Any:
    """A frozen deep copy of ``model`` in eval mode; with ``dtype``, each parameter is copied once,
    cast (``deepcopy``'s memo hands the casts out, so tied parameters stay tied)."""
    memo: dict[int, Any] = {}
    if dtype is not None:
        for p in model.parameters():  # named_parameters' de-duplication: one cast per tied tensor
            memo[id(p)] = torch.nn.Parameter(p.detach().to(dtype, copy=True), requires_grad=False)
    ref = copy.deepcopy(model, memo)
    ref.requires_grad_(False)
    ref.eval()
    return ref
