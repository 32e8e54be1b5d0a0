"""One copy of the frozen embedding and output head for an in-process CPU engine and its learners.

In ``adapters`` mode the learners' base is frozen, and a role switch reloads only the modules that
carry LoRA adapters. The input embedding and the output head usually carry none, so vLLM's copies of
them never change and equal the base's. On a CPU vLLM holds three more of those matrices than it
needs: the embedding's own weight, a oneDNN-packed copy of it made for a matmul the embedding never
runs, and the output head's plain weight beside the packed one its matmul uses. For Qwen2.5-0.5B in
fp32 each is 0.54 GB.

:func:`share_frozen_tensors` points vLLM's embedding and head weights at the learner's tensors (the
base as the learner loaded it: the model cache's safetensors file, mapped, so pages are shared and
only the embedding rows looked up are ever read) and drops the embedding's unused packed copy. A tied
head keeps its packed copy, which is what samples; its weight is the embedding's and follows it.
Nothing is shared when the engine's tensor differs in shape or dtype from the base's (a padded
vocabulary, an engine in bf16 over an fp32 learner), or when a LoRA adapter targets the module: a
reload would then write into the learner's base.

Imports: torch.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import torch

EMBEDDING = "model.embed_tokens.weight"
"""Hugging Face name of the input embedding of the decoders vLLM serves here (Llama, Qwen2)."""
HEAD = "lm_head.weight"
"""Hugging Face name of the output head."""


def share_frozen_tensors(worker: Any, base: Mapping[str, torch.Tensor], adapted: Collection[str]) -> int:
    """Share the frozen embedding and head of ``worker``'s model with ``base`` (Hugging Face names);
    ``adapted`` names the weights a LoRA adapter changes, which are never shared. Returns the bytes
    of engine memory released (run in the engine's process: the tensors are not copied)."""
    model = worker.model_runner.get_model()
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    head = getattr(model, "lm_head", None)
    released = 0
    tied = head is not None and embed is not None and head.weight is embed.weight
    for module, name in ((embed, EMBEDDING), (None if tied else head, HEAD)):
        if module is None or name in adapted or name not in base:
            continue
        released += _point_at(module, base[name])
    if embed is not None and head is not embed and EMBEDDING not in adapted:
        released += _drop_unused_kernel(embed)
    return released


def _point_at(module: torch.nn.Module, tensor: torch.Tensor) -> int:
    """Make ``module.weight`` use ``tensor``'s storage when they match in shape and dtype; the bytes
    freed (0 when they do not match or already share)."""
    weight = module.weight
    if weight.shape != tensor.shape or weight.dtype != tensor.dtype or weight.device != tensor.device:
        return 0
    if weight.data_ptr() == tensor.data_ptr():
        return 0
    weight.data = tensor.detach()
    return tensor.numel() * tensor.element_size()


def _drop_unused_kernel(embed: torch.nn.Module) -> int:
    """Replace the embedding's packed CPU matmul (vLLM builds one for every vocabulary layer; an
    untied embedding only looks rows up) by a plain ``linear`` on its weight; the bytes freed."""
    kernel = getattr(embed, "cpu_linear", None)
    if kernel is None or not getattr(kernel, "__closure__", None):
        return 0
    packed = any(hasattr(cell.cell_contents, "handler_tensor") for cell in kernel.__closure__)
    embed.cpu_linear = _plain_linear
    return embed.weight.numel() * embed.weight.element_size() if packed else 0


def _plain_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The matmul vLLM's CPU layers fall back to."""
    return torch.nn.functional.linear(x, weight, bias)
