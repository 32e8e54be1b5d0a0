"""The trainer side of a weight sync, through vLLM's weight-transfer API and its trainer factory.

:class:`Sender` drives one engine's rounds with the trainer engine that ``WeightTransferTrainerFactory``
builds for the backend the engine was started with (``weight_sync.select_backend``):
``codea1_buckets`` (``bucket_engine.BucketTrainerEngine``: buckets or, in-process, the tensors
themselves) or vLLM's ``ipc`` (``IPCTrainerWeightTransferEngine``, packed: bounded staging buffers of
``bucket_bytes`` on the GPU) and ``nccl`` (``NCCLTrainerWeightTransferEngine``). :class:`LLMClient`
is vLLM's ``VLLMWeightSyncClient`` protocol over a ``vllm.LLM`` in this process;
:class:`TensorSource` is the ``WeightSource`` vLLM's full-resync engines replay each round (the
round's tensors, cast to the wire dtype, FSDP shards gathered one at a time).

The ``ipc`` and ``nccl`` paths are written against vLLM 0.32's source and tested with fakes only:
**they have not run on a GPU yet** (docs/cluster.md). ``codea1_buckets`` runs on CPU (tests).

Imports: torch, vllm (weight transfer), this package's bucket_engine and weight_sync.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource, materialize_full_tensor
from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

from codea1.engine.vllm_local.bucket_engine import BucketTrainerEngine, BucketTrainerInitInfo
from codea1.engine.vllm_local.weight_sync import (
    BUCKET_BYTES,
    BUCKETS_BACKEND,
    staging_bytes,
    wire_bytes,
    wire_dtype,
)


class LLMClient:
    """vLLM's ``VLLMWeightSyncClient`` (structural) over a ``vllm.LLM`` (its ``RLOfflineMixin``
    methods, which take the request wrapped in a dict)."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        """Tell the engine's workers how this trainer sends."""
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def start_weight_update(self) -> None:
        """Open an update round on the workers."""
        self.llm.start_weight_update()

    def update_weights(self, update_info: Any) -> None:
        """One chunk of the round."""
        self.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        """Close the round."""
        self.llm.finish_weight_update(weight_version)


class TensorSource(WeightSource):
    """The current round's tensors (Hugging Face names) as vLLM's ``WeightSource``: floating-point
    tensors in ``dtype`` (their own when None), on ``device`` (theirs when None). A sharded tensor
    (FSDP2 DTensor) is cast on its shard, then gathered whole (``full_tensor``, a collective every
    rank runs in the same order); ``metadata`` reads the global shapes without gathering."""

    def __init__(self, dtype: torch.dtype | None = None, device: torch.device | None = None) -> None:
        self.dtype, self.device = dtype, device
        self.weights: Mapping[str, torch.Tensor] = {}

    def metadata(self) -> list[ParamMeta]:
        """Name, wire dtype and full shape of every tensor of the round, in order."""
        return [ParamMeta(n, wire_dtype(t, self.dtype), tuple(t.shape)) for n, t in self.weights.items()]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in self.weights.items():
            t = tensor.detach()
            wire = wire_dtype(t, self.dtype)
            if t.dtype != wire:
                t = t.to(wire)
            t = materialize_full_tensor(t)
            yield name, t if self.device is None else t.to(self.device)

    def nbytes(self) -> int:
        """Bytes of the round's tensors in their wire dtype."""
        return sum(wire_bytes(t, self.dtype) for t in self.weights.values())


def trainer_init_info(backend: str, *, rank: int = 0, bucket_bytes: int = BUCKET_BYTES, **fields: Any) -> Any:
    """The trainer init info of ``backend`` (its ``backend`` class attribute is the factory's key).
    ``codea1_buckets`` takes ``in_process``; ``ipc`` is packed in a staging buffer of
    ``bucket_bytes`` (:class:`Sender` grows it to a round's largest tensor); ``nccl`` needs ``master_address``, ``master_port`` and ``world_size``."""
    if backend == BUCKETS_BACKEND:
        return BucketTrainerInitInfo(rank=rank, bucket_bytes=bucket_bytes, **fields)
    if backend == "ipc":
        from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

        return IPCTrainerInitInfo(rank=rank, packed=True, packed_buffer_size_bytes=bucket_bytes, **fields)
    if backend == "nccl":
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        return NCCLTrainerInitInfo(rank=rank, packed=True, packed_buffer_size_bytes=bucket_bytes, **fields)
    raise ValueError(f"no trainer side for weight-transfer backend {backend!r}")


class Sender:
    """The trainer side of one engine's syncs: built through vLLM's trainer factory by :meth:`open`
    (the handshake; on the first :meth:`send` at the latest), then one update round per call.

    ``send`` returns (bytes of the round's tensors in their wire dtype, chunks: ``codea1_buckets``'
    buckets across processes, else 0). With ``ipc`` the staging buffer holds at least the round's
    largest tensor in its wire dtype (``weight_sync.staging_bytes``): a round with a larger one
    than the open engine's buffer reopens it with a buffer that fits (IPC has no rendezvous to redo;
    every rank of a sharded trainer sees the same shapes and decides alike).
    """

    def __init__(self, client: Any, init_info: Any, *, device: Any = None) -> None:
        self.client, self.init_info = client, init_info
        self.backend = str(type(init_info).backend)
        self.source = TensorSource(None, device)
        self.engine: Any = None

    def open(self) -> None:
        """The handshake (once): vLLM's trainer factory builds the engine of the init info's backend,
        which tells the workers how it sends (``nccl``: and joins them in one NCCL group)."""
        if self.engine is None:
            source = None if self.backend == BUCKETS_BACKEND else self.source
            self.engine = WeightTransferTrainerFactory.trainer_init(
                self.init_info, client=self.client, source=source
            )

    def send(self, weights: Mapping[str, torch.Tensor], dtype: torch.dtype | None) -> tuple[int, int]:
        """One update round of ``weights``, floating-point tensors in ``dtype`` (their own when
        None; in-process they go as they are). All ranks of a sharded trainer call it."""
        if self.backend == "ipc":
            self._fit_staging_buffer(weights, dtype)
        self.open()
        if isinstance(self.engine, BucketTrainerEngine):
            self.engine.send(weights, dtype)
            return self.engine.last_bytes, self.engine.last_chunks
        self.source.weights, self.source.dtype = weights, dtype
        self.engine.send_weights()
        return self.source.nbytes(), 0

    def _fit_staging_buffer(self, weights: Mapping[str, torch.Tensor], dtype: torch.dtype | None) -> None:
        """Grow the ``ipc`` staging buffer to the round's largest tensor in its wire dtype."""
        size = int(self.init_info.packed_buffer_size_bytes)
        need = staging_bytes(weights, dtype, size)
        if need > size:
            self.close()
            self.init_info = dataclasses.replace(self.init_info, packed_buffer_size_bytes=need)

    def close(self) -> None:
        """Release the trainer engine's communicators."""
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None
