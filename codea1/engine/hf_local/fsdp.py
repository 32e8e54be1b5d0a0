"""FSDP2 sharding of a transformers causal LM (or the base of a peft model) over the default
``torch.distributed`` group: each decoder layer is one ``fully_shard`` unit, then the root (the
embeddings, the final norm and a tied or untied output head).

Imports: torch, this package's logprobs.
"""

from __future__ import annotations

from typing import Any

import torch

from codea1.engine.hf_local.logprobs import SCORER_ATTRIBUTE, ResponseScorer


def decoder_layers(model: Any) -> torch.nn.ModuleList:
    """The decoder layers of a causal LM: its ``ModuleList`` with ``num_hidden_layers`` entries."""
    count = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == count:
            return module
    raise ValueError(f"{type(model).__name__}: no list of {count} decoder layers to shard")


def shard(model: Any, compute_dtype: torch.dtype | None = None, *, offload: bool = False) -> Any:
    """Shard ``model`` in place with FSDP2 (a peft model: its base, adapters included); returns it.

    The root of the sharding is the causal LM's :class:`ResponseScorer`, the module whose forward
    the learner runs (decoder, then the output head in chunks), kept on the causal LM so that
    ``response_logprobs`` finds it. With ``compute_dtype`` (bf16 for fp32 weights) the shards stay
    in their own dtype, the master weights the optimizer updates, while the gathered weights the
    layers compute with are cast to ``compute_dtype``; gradients are reduced in fp32. With
    ``offload`` (CUDA only: it pins host memory) the shards live in host memory, FSDP2's
    ``CPUOffloadPolicy``: each unit is copied to the GPU for its all-gather (a frozen reference's
    forward; a trained model would also step its optimizer on the CPU).
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    options: dict[str, Any] = {}
    if offload:
        options["offload_policy"] = CPUOffloadPolicy()
    if compute_dtype is not None:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for layer in decoder_layers(base):
        fully_shard(layer, **options)
    scorer = ResponseScorer(base)
    fully_shard(scorer, **options)
    object.__setattr__(base, SCORER_ATTRIBUTE, scorer)
    return model
