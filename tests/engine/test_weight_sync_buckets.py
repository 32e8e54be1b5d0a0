"""Buckets of a weight sync to a multiprocess vLLM engine: bounded, in order, cast, exact round trip.

No engine starts here: a fake one records the calls of vLLM's weight-transfer API
(``tests/engine/test_vllm_sync_multiprocess.py`` syncs a real one).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from codea1.engine.vllm_local.weight_sync import ALIGN, buckets, pack, unpack, wire_bytes


def _weights() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        "model.embed_tokens.weight": torch.randn(64, 16, generator=gen),  # 4 KiB in fp32
        "model.layers.0.self_attn.q_proj.weight": torch.randn(16, 16, generator=gen),
        "model.layers.0.self_attn.q_proj.bias": torch.randn(3, generator=gen),  # not a multiple of ALIGN
        "model.layers.0.mlp.up_proj.weight": torch.randn(32, 16, generator=gen),
        "model.norm.weight": torch.randn(16, generator=gen),
        "step": torch.tensor([7], dtype=torch.int64),  # not floating point: travels as it is
    }


def test_buckets_keep_order_and_bound_and_a_large_tensor_travels_alone() -> None:
    weights = _weights()
    groups = list(buckets(weights, torch.bfloat16, 1024))
    assert [n for g in groups for n, _ in g] == list(weights)
    assert groups[0] == [("model.embed_tokens.weight", weights["model.embed_tokens.weight"])]  # 2 KiB > bound
    for g in groups[1:]:
        assert sum(-(-wire_bytes(t, torch.bfloat16) // ALIGN) * ALIGN for _, t in g) <= 1024
    assert len(list(buckets(weights, None, 1 << 30))) == 1


def test_pack_casts_floating_tensors_and_unpack_reads_them_back() -> None:
    weights = _weights()
    items = list(weights.items())
    meta, blob = pack(items, torch.bfloat16)
    assert all(start % ALIGN == 0 for *_, start in meta)
    received = bytes(blob)  # msgpack delivers the payload as bytes
    out = dict(unpack([list(m) for m in meta], received))
    assert list(out) == list(weights)
    for name, tensor in weights.items():
        got = out[name]
        assert got.shape == tensor.shape
        if tensor.is_floating_point():
            assert got.dtype == torch.bfloat16
            assert torch.equal(got, tensor.to(torch.bfloat16))
        else:
            assert got.dtype == tensor.dtype and torch.equal(got, tensor)


def test_fp32_travels_exactly_and_an_empty_bucket_is_fine() -> None:
    weights = _weights()
    meta, blob = pack(list(weights.items()), None)
    out = dict(unpack(meta, bytes(blob)))
    assert all(torch.equal(out[n], t) for n, t in weights.items())
    meta, blob = pack([("empty", torch.zeros(0, 4))], torch.bfloat16)
    ((name, tensor),) = unpack(meta, bytes(blob))
    assert name == "empty" and tensor.shape == (0, 4) and tensor.dtype == torch.bfloat16


class FakeEngine:
    """Stands for ``vllm.LLM`` in its multiprocess mode: records the calls of vLLM's weight-transfer
    API (``LLM.start_weight_update`` / ``update_weights`` / ``finish_weight_update``) and hands each
    chunk to the real worker-side engine's parser, then unpacks it."""

    def __init__(self, dtype: torch.dtype, fail_at: int | None = None) -> None:
        self.llm_engine = SimpleNamespace(model_config=SimpleNamespace(dtype=dtype))
        self.calls: list[str] = []
        self.received: dict[str, torch.Tensor] = {}
        self.fail_at = fail_at

    def init_weight_transfer_engine(self, request) -> None:
        assert request == {"init_info": {}}  # codea1_buckets needs no rendezvous
        self.calls.append("init_weight_transfer_engine")

    def start_weight_update(self) -> None:
        self.calls.append("start_weight_update")

    def update_weights(self, request) -> None:
        from codea1.engine.vllm_local.bucket_engine import BucketUpdateInfo

        self.calls.append("update_weights")
        if self.fail_at is not None and self.calls.count("update_weights") == self.fail_at:
            raise RuntimeError("worker died")
        info = BucketUpdateInfo(**request["update_info"])
        self.received.update({n: t.clone() for n, t in unpack(info.meta, bytes(info.blob))})

    def finish_weight_update(self, weight_version=None) -> None:
        self.calls.append("finish_weight_update")

    def reset_prefix_cache(self) -> None:
        self.calls.append("reset_prefix_cache")


def test_a_multiprocess_sync_sends_buckets_in_the_engines_dtype_through_vllms_weight_transfer_api() -> None:
    from codea1.engine.vllm_local.policy import VLLMPolicy, VLLMRollout

    weights = _weights()
    engine = FakeEngine(torch.bfloat16)
    rollout = VLLMRollout(engine, in_process=False, bucket_bytes=1024)
    assert rollout.dtype == torch.bfloat16  # the engine's own
    assert rollout.backend == "codea1_buckets"  # an engine that names no backend
    policy = VLLMPolicy(rollout, tokenizer=None, eos_ids=[0], role="coder")
    policy.load_weights(weights)
    count = len(list(buckets(weights, torch.bfloat16, 1024)))
    assert engine.calls == [
        "init_weight_transfer_engine", "start_weight_update", *["update_weights"] * count,
        "finish_weight_update", "reset_prefix_cache",
    ]  # fmt: skip
    for name, tensor in weights.items():
        assert torch.equal(
            engine.received[name], tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor
        )
    sent = sum(wire_bytes(t, torch.bfloat16) for t in weights.values())
    assert policy.last_sync == {
        "seconds": policy.last_sync["seconds"],
        "bytes": sent,
        "tensors": 6,
        "buckets": count,
    }
    assert policy.last_stats == {"sync_seconds": policy.last_sync["seconds"], "sync_bytes": sent}
    policy.load_weights(weights)  # the handshake happens once
    assert engine.calls.count("init_weight_transfer_engine") == 1
    assert engine.calls[-2:] == ["finish_weight_update", "reset_prefix_cache"]


def test_a_failed_bucket_still_ends_the_update() -> None:
    from codea1.engine.vllm_local.policy import VLLMRollout

    engine = FakeEngine(torch.float32, fail_at=2)
    with pytest.raises(RuntimeError, match="worker died"):
        VLLMRollout(engine, in_process=False, bucket_bytes=1024).load_weights(_weights())
    assert engine.calls[-1] == "finish_weight_update"
