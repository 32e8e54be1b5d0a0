"""A role's model built for FSDP2 ranks with one copy of its weights in host memory, not one per rank.

Every rank builds the model's structure on the meta device (no memory), shards it with FSDP2,
allocates only its own shards (:func:`materialize`, on its device, or in host memory for a
``CPUOffloadPolicy`` module), and receives its part of the weights from rank 0
(:func:`receive_weights`): rank 0 alone reads the checkpoint, into host memory, and broadcasts it
tensor by tensor through ``torch.distributed.checkpoint.state_dict.set_model_state_dict``
(``broadcast_from_rank0``), each rank keeping the slice its shard holds. Buffers (a rotary
embedding's frequencies, which are not in a state dict) are broadcast from rank 0 the same way.
Rank 0 holds one whole model in host memory while the group starts; the other ranks hold at most
one whole tensor at a time beside their shards.

Imports: torch, transformers, engine.loading.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from codea1.config import EngineConfig
from codea1.engine.loading import load_model_and_tokenizer, load_tokenizer, model_location, pick_dtype


def empty_model(engine_cfg: EngineConfig, spec: str) -> tuple[Any, Any]:
    """The model of ``spec`` (gradient checkpointing as configured) with its parameters and buffers
    on the meta device, in ``engine_cfg.dtype``, and its tokenizer; nothing of the weights is read."""
    from transformers import AutoConfig, AutoModelForCausalLM

    location = model_location(spec, engine_cfg.cache_dir)
    tokenizer = load_tokenizer(location)
    dtype = pick_dtype(engine_cfg.dtype, torch.device("meta"))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(location), dtype=dtype)
    model.eval()
    if engine_cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, tokenizer


def full_weights(engine_cfg: EngineConfig, spec: str) -> Any:
    """The model of ``spec`` read from its checkpoint into host memory in ``engine_cfg.dtype`` (what
    rank 0 broadcasts)."""
    model, _ = load_model_and_tokenizer(spec, engine_cfg.dtype, "cpu", engine_cfg.cache_dir)
    return model


def materialize(module: torch.nn.Module, device: torch.device, *, offload: bool = False) -> None:
    """Allocate the (sharded) parameters and the buffers of a meta-device ``module``, uninitialised:
    parameters on ``device``, or in host memory with ``offload`` (FSDP2's ``CPUOffloadPolicy`` keeps
    the shards there), buffers on ``device``."""
    module.to_empty(device="cpu" if offload else device)
    if offload:
        for sub in module.modules():
            for name, buffer in list(sub.named_buffers(recurse=False)):
                sub.register_buffer(
                    name, buffer.to(device), persistent=name not in sub._non_persistent_buffers_set
                )


def receive_weights(module: torch.nn.Module, source: torch.nn.Module | None) -> None:
    """Fill ``module`` (sharded and materialised, the same structure on every rank) with the values of
    rank 0's ``source`` (a whole model in host memory; None on the other ranks), cast to each
    parameter's dtype; every rank of the default group calls."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    rank = torch.distributed.get_rank()
    if (source is None) != (rank != 0):
        raise ValueError(f"rank {rank}: the weights' source must be given on rank 0 alone")
    state: dict[str, Any] = dict(source.state_dict()) if source is not None else {}
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(module, state, options=options)
    _broadcast_buffers(module, dict(source.named_buffers()) if source is not None else None)


def _broadcast_buffers(module: torch.nn.Module, source: Mapping[str, torch.Tensor] | None) -> None:
    """Every buffer of ``module`` from rank 0's ``source`` (by name), over the default group."""
    for name, buffer in module.named_buffers():
        if buffer.is_meta:
            raise RuntimeError(f"buffer {name} was not materialised")
        if source is not None:
            if name not in source:
                raise KeyError(f"rank 0's model has no buffer {name}")
            buffer.copy_(source[name])
        if torch.distributed.get_backend() == "nccl" and buffer.device.type != "cuda":
            moved = buffer.to("cuda")
            torch.distributed.broadcast(moved, src=0)
            buffer.copy_(moved)
        else:
            torch.distributed.broadcast(buffer, src=0)
