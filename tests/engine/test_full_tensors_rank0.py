"""``full_tensors`` on FSDP2 shards: whole tensors on rank 0's CPU only, in the asked dtype.

Two gloo ranks in processes of their own (no Ray) shard a small module with FSDP2. Rank 0 gets
every tensor whole, on the CPU, cast to bf16 before the gather (the rollout dtype of a weight
sync) or in fp32 (a checkpoint); rank 1 takes part in every gather and keeps nothing.
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

pytestmark = pytest.mark.slow  # two processes start torch.distributed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _module() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Linear(7, 3))  # uneven over 2 ranks


def _rank(rank: int, port: int, out: dict) -> None:
    from torch.distributed.fsdp import fully_shard

    from codea1.engine.hf_local.sharded_state import full_tensors, is_sharded

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        module = _module()
        for layer in module:
            fully_shard(layer)
        fully_shard(module)
        params = dict(module.named_parameters())
        assert all(is_sharded(p) for p in params.values())
        for key, dtype in (("bf16", torch.bfloat16), ("fp32", None)):
            got = full_tensors(params, dtype)
            out[(rank, key)] = {n: (t.dtype, t.device.type, t.clone()) for n, t in got.items()}
    finally:
        torch.distributed.destroy_process_group()


def test_rank0_alone_gets_the_whole_tensors_on_the_cpu_in_the_asked_dtype() -> None:
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank, args=(_free_port(), out), nprocs=2)
        out = dict(out)
    whole = dict(_module().named_parameters())
    assert out[(1, "bf16")] == {} and out[(1, "fp32")] == {}
    for key, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        got = out[(0, key)]
        assert sorted(got) == sorted(whole)
        for name, (got_dtype, device, tensor) in got.items():
            assert (got_dtype, device) == (dtype, "cpu")
            assert torch.equal(tensor, whole[name].detach().to(dtype))
