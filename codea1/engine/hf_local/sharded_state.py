"""Learner state that survives a change of world size: full weights, sharded optimizer state.

A learner whose parameters are sharded with FSDP2 (DTensors) saves its trainable weights whole
(``weights.safetensors``, gathered tensor by tensor onto rank 0's CPU and written by rank 0: what
evaluation and export read) and its optimizer state sharded with ``torch.distributed.checkpoint``
(``dcp/``, each rank writing its own shards), plus the scheduler (``scheduler.pt``).
``torch.distributed.checkpoint`` reshards on load, so such a checkpoint resumes with any number of
ranks, and in one process without ``torch.distributed`` (the local backend). Conversely a sharded learner loads a one-process
checkpoint (``optimizer.pt``) by naming its optimizer state and scattering it.

Imports: torch.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

DCP_DIR = "dcp"
SCHEDULER_FILE = "scheduler.pt"


def is_sharded(tensor: Any) -> bool:
    """True for a DTensor (a parameter sharded by FSDP2)."""
    return hasattr(tensor, "full_tensor") and hasattr(tensor, "device_mesh")


def full_tensors(
    params: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """Every tensor whole and detached, floating-point ones in ``dtype`` (their own when None).

    Unsharded tensors come back as they are: views, no copy, unless ``dtype`` casts them. Sharded
    ones (DTensors) are gathered one at a time, a collective that every rank must call with the same
    tensors in the same order: each shard is cast first (so the gather moves ``dtype``, half the
    bytes of fp32 master weights for a bf16 rollout), and only rank 0 keeps the whole tensor, copied
    to the CPU before the next gather. So rank 0's accelerator holds one whole tensor at a time, the
    other ranks keep no gathered tensor (a fully sharded model gives them ``{}``), and no rank ever
    holds the whole model on its device.
    """
    keep = rank() == 0
    out: dict[str, torch.Tensor] = {}
    for name, p in params.items():
        t = p.detach()
        if dtype is not None and t.is_floating_point() and t.dtype != dtype:
            t = t.to(dtype)  # a DTensor stays sharded: the cast is local
        if not is_sharded(t):
            out[name] = t
            continue
        whole = t.full_tensor()
        if keep:
            out[name] = whole.to("cpu")
        del whole
    return out


def rank() -> int:
    """This process's rank (0 without ``torch.distributed``)."""
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def barrier() -> None:
    """Wait for every rank (nothing without ``torch.distributed``)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def save_sharded_optimizer(learner: Any, path: Path) -> None:
    """Write ``learner``'s optimizer state under ``path / dcp`` (every rank its own shards; every
    rank calls this). The learner writes the weights and the scheduler itself."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    optim = get_optimizer_state_dict(learner.weights.owner(), learner.optimizer)
    dcp.save({"optim": optim}, checkpoint_id=str(path / DCP_DIR))


def load_weights_into(params: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor]) -> None:
    """Copy whole tensors into (possibly sharded) parameters of the same names."""
    from torch.distributed.tensor import distribute_tensor

    with torch.no_grad():
        for name, p in params.items():
            value = tensors[name]
            if is_sharded(p):
                local = distribute_tensor(value.to(p.dtype), p.device_mesh, p.placements)
                p.to_local().copy_(local.to_local().to(p.to_local().device))
            else:
                p.copy_(value.to(p.device, p.dtype))


def load_sharded_optimizer(learner: Any, path: Path) -> None:
    """Restore optimizer and scheduler state from ``dcp/`` and ``scheduler.pt`` (any world size)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    module = learner.weights.owner()
    state = {"optim": get_optimizer_state_dict(module, learner.optimizer)}
    with warnings.catch_warnings():  # one process without torch.distributed is a supported reader
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(path / DCP_DIR))
    set_optimizer_state_dict(module, learner.optimizer, optim_state_dict=state["optim"])
    learner.scheduler.load_state_dict(
        torch.load(path / SCHEDULER_FILE, map_location="cpu", weights_only=True)
    )


def load_full_optimizer(learner: Any, state: dict[str, Any]) -> None:
    """Restore a one-process optimizer state (``optimizer.state_dict()``: parameters by position)
    into a learner whose parameters may be sharded: positions become parameter names, then the
    named state is scattered to the shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = list(learner.params)
    optim = state["optimizer"]
    named = {
        "state": {names[int(i)]: v for i, v in optim["state"].items()},
        "param_groups": [
            {**g, "params": [names[int(i)] for i in g["params"]]} for g in optim["param_groups"]
        ],
    }
    set_optimizer_state_dict(
        learner.weights.owner(), learner.optimizer, optim_state_dict=named,
        options=StateDictOptions(full_state_dict=True),
    )  # fmt: skip
    learner.scheduler.load_state_dict(state["scheduler"])
