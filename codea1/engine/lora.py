"""LoRA tensor bookkeeping shared by the engines: peft parameter names, merged weights.

A peft model names a role's LoRA tensors ``base_model.model.<module>.lora_A.<role>.weight``
(``[r, in]``) and ``...lora_B.<role>.weight`` (``[out, r]``); the frozen weight of ``<module>``
is ``base_model.model.<module>.base_layer.weight``. The merged weight a plain model needs is
``W + (B @ A) × alpha / r``, which holds for the plain LoRA that ``engine.lora_*`` configures (no
rsLoRA, no DoRA; dropout does not enter the merge).

Imports: torch.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

PEFT_PREFIX = "base_model.model."


def plain_name(peft_name: str) -> str:
    """The Hugging Face name of a peft model's base parameter (prefix and ``.base_layer`` removed)."""
    return peft_name.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")


def base_weights(peft_model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every non-LoRA parameter of ``peft_model`` under its plain name (detached views, no copy)."""
    return {plain_name(n): p.detach() for n, p in peft_model.named_parameters() if ".lora_" not in n}


def adapted_weights(peft_model: torch.nn.Module) -> set[str]:
    """Plain names of the base weights that some LoRA adapter of ``peft_model`` changes."""
    return {
        plain_name(n.split(".lora_A.")[0]) + ".weight"
        for n, _ in peft_model.named_parameters()
        if ".lora_A." in n
    }


def lora_deltas(weights: Mapping[str, torch.Tensor], role: str, scale: float) -> dict[str, torch.Tensor]:
    """``{"<module>.weight": (B @ A) × scale}`` for every module with both LoRA tensors of ``role``."""
    a_marker, b_marker = f".lora_A.{role}.weight", f".lora_B.{role}.weight"
    out = {}
    for name, a in weights.items():
        if not name.endswith(a_marker):
            continue
        module = name.removesuffix(a_marker)
        b = weights.get(module + b_marker)
        if b is None:
            raise ValueError(f"LoRA tensor {name} has no lora_B partner {module + b_marker}")
        out[plain_name(module) + ".weight"] = (b.float() @ a.float()) * scale
    if not out:
        raise ValueError(f"no LoRA tensors of adapter {role!r} among {len(weights)} tensors")
    return out


def merged_weights(
    base: Mapping[str, torch.Tensor], weights: Mapping[str, torch.Tensor], role: str, scale: float
) -> dict[str, torch.Tensor]:
    """The weights of the adapted modules with ``role``'s LoRA merged in, in the base's dtype."""
    merged = {}
    for name, delta in lora_deltas(weights, role, scale).items():
        if name not in base:
            raise ValueError(f"LoRA module {name} has no base weight")
        w = base[name]
        merged[name] = (w.float() + delta.to(w.device)).to(w.dtype)
    return merged
