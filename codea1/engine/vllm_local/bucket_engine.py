"""codea1's bucketed weight transfer as a vLLM weight-transfer engine (backend ``codea1_buckets``).

vLLM 0.32 moves trainer weights into its workers through ``vllm.distributed.weight_transfer``: the
engine is started with ``weight_transfer_config={"backend": NAME}``, its worker builds the engine
registered under NAME in ``WeightTransferEngineFactory`` when it loads the model, and a sync is
``LLM.start_weight_update`` → ``LLM.update_weights`` (once per chunk) → ``LLM.finish_weight_update``.
vLLM's own backends (``nccl``, ``ipc``) need CUDA. This module registers the CPU-capable one codea1
uses wherever those cannot run, on both sides of vLLM's registries:

- :class:`BucketWeightTransferEngine` (worker side, ``WeightTransferEngineFactory``): the layer-wise
  reload starts in ``start_weight_update`` (each layer's kernel tensors set aside, its loaders
  buffering what arrives); each ``update_weights`` loads one chunk with the model's
  ``load_weights`` (Hugging Face names; vLLM fuses q/k/v and gate/up; a layer is processed, on CPU
  repacked, as soon as all its tensors have arrived); ``finish_weight_update`` ends the reload
  (layers given no tensor get theirs back) and rebuilds an output head tied to the embedding
  (``weight_sync.repack_tied_head``). vLLM's worker resets its LoRA state after it.
- :class:`BucketTrainerEngine` (trainer side, ``WeightTransferTrainerFactory``): one round per
  ``send`` of a mapping of tensors. Across processes each chunk is one bucket packed by
  ``weight_sync.pack`` (tensors cast to the wire dtype, at most ``bucket_bytes``), sent as ``bytes``
  through vLLM's msgpack RPC; in-process (CPU, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``) the one chunk
  is the list of tensors themselves (no copy).

The factory's registry takes a custom engine as it is. One thing in vLLM's base class does not run
on a CPU: ``WeightTransferEngine.update_weights`` ends with ``torch.accelerator.synchronize()``,
which raises "Cannot access accelerator device when none is available" without an accelerator; the
engine here overrides ``update_weights`` to synchronize only when there is one.

A worker in another process (vLLM's multiprocess mode) must see the registration too: an engine
that uses this backend across processes is started with ``worker_extension_cls`` =
``weight_sync.REGISTERING_EXTENSION`` (:class:`RegistersBucketEngine`), which vLLM imports in each worker before it loads the model (the
import registers the engine; the class adds no method).

Imports: torch, vllm (its weight-transfer package and model loader), this package's console and
weight_sync.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import torch
from vllm.distributed.weight_transfer.base import (
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    VLLMWeightSyncClient,
    WeightSource,
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory

from codea1.engine.vllm_local.console import expected_reload_warnings_hidden
from codea1.engine.vllm_local.weight_sync import (
    BUCKET_BYTES,
    BUCKETS_BACKEND,
    buckets,
    pack,
    repack_tied_head,
    unpack,
    wire_bytes,
)


@dataclass
class BucketInitInfo(WeightTransferInitInfo):
    """Worker-side init info: nothing to rendezvous (the chunks ride vLLM's own RPC)."""


@dataclass
class BucketUpdateInfo(WeightTransferUpdateInfo):
    """One chunk: a packed bucket (``meta`` + ``blob``, across processes) or, in-process only, the
    ``tensors`` themselves as ``(name, tensor)`` pairs."""

    meta: list[Any] = field(default_factory=list)
    blob: bytes | memoryview | None = None
    tensors: list[Any] | None = None

    def __post_init__(self) -> None:
        if (self.blob is None) == (self.tensors is None):
            raise ValueError("a codea1_buckets update carries either meta and blob or tensors")


class BucketWeightTransferEngine(WeightTransferEngine[BucketInitInfo, BucketUpdateInfo]):
    """The worker side of :data:`BUCKETS_BACKEND` (built by vLLM's worker through the factory)."""

    init_info_cls = BucketInitInfo
    update_info_cls = BucketUpdateInfo
    supports_draft_weight_update = False

    def init_transfer_engine(self, init_info: BucketInitInfo) -> None:
        """Nothing to open: chunks arrive as arguments of ``update_weights``."""

    def start_weight_update(self) -> None:
        """Start a layer-wise reload: set the kernel tensors aside, buffer incoming weights."""
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        """Load one chunk; the device is synchronized only where there is an accelerator (vLLM's
        base class synchronizes unconditionally, which raises on a CPU)."""
        self.receive_weights(self.parse_update_info(update_info))
        if torch.accelerator.is_available():
            torch.accelerator.synchronize()

    def receive_weights(self, update_info: BucketUpdateInfo) -> None:
        """Hand the chunk's tensors (Hugging Face names) to the model's ``load_weights``."""
        if update_info.tensors is not None:
            items = [(str(n), t) for n, t in update_info.tensors]
        else:
            items = unpack(update_info.meta, update_info.blob or b"")
        self.model.load_weights(items)

    def finish_weight_update(self) -> None:
        """End the reload (layers given no tensor keep theirs) and rebuild a tied output head."""
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        with expected_reload_warnings_hidden():
            finalize_layerwise_reload(self.model, self.model_config)
        repack_tied_head(self.model)

    def shutdown(self) -> None:
        """Nothing to release."""


@dataclass
class BucketTrainerInitInfo(TrainerInitInfo):
    """Trainer-side init info of :data:`BUCKETS_BACKEND`: how chunks are cut and what they carry."""

    backend: ClassVar[str] = BUCKETS_BACKEND
    in_process: bool = False
    """The worker runs in this process: send the tensors themselves, one chunk."""
    bucket_bytes: int = BUCKET_BYTES


class BucketTrainerEngine(TrainerWeightTransferEngine[BucketTrainerInitInfo]):
    """The trainer side of :data:`BUCKETS_BACKEND`: one update round per :meth:`send`.

    The tensors of a round are an argument (a partial set updates only those; ``adapters`` mode
    sends the merged projections of a role), so ``source`` stays None, as vLLM's base class allows
    for backends that take their payload per round. ``last_bytes`` / ``last_chunks`` describe the
    latest round (bytes in the wire dtype; chunks 0 in-process: one call, no copy).
    """

    init_info_cls = BucketTrainerInitInfo

    def __init__(self, *, client: VLLMWeightSyncClient, init_info: BucketTrainerInitInfo) -> None:
        super().__init__(client=client, source=None, is_sender=init_info.is_sender)
        self.in_process = init_info.in_process
        self.bucket_bytes = init_info.bucket_bytes
        self.last_bytes = 0
        self.last_chunks = 0

    @classmethod
    def trainer_init(
        cls,
        init_info: BucketTrainerInitInfo,
        *,
        client: VLLMWeightSyncClient,
        source: WeightSource | None = None,
    ) -> Self:
        """A ready engine; the sender tells the workers (no rendezvous)."""
        engine = cls(client=client, init_info=init_info)
        if engine.is_sender:
            client.init_weight_transfer_engine({})
        return engine

    def send_weights(self) -> None:
        """Not used: this backend takes each round's tensors as an argument (:meth:`send`)."""
        raise TypeError("codea1_buckets sends a mapping per round: call send(weights)")

    def send(self, weights: Mapping[str, torch.Tensor], dtype: torch.dtype | None) -> None:
        """One update round of ``weights``, floating-point tensors in ``dtype`` across processes
        (their own when None; in-process they go as they are). The reload is closed even when a chunk fails on this
        side; when the worker failed, vLLM has already ended its update and the error is the chunk's."""
        sent = chunks = 0
        self.client.start_weight_update()
        try:
            if self.in_process:
                items = [(n, t.detach()) for n, t in weights.items()]
                self.client.update_weights({"tensors": items})
                sent = sum(wire_bytes(t, None) for _, t in items)
            else:
                for bucket in buckets(weights, dtype, self.bucket_bytes):
                    meta, blob = pack(bucket, dtype)
                    self.client.update_weights({"meta": meta, "blob": blob})
                    sent += sum(wire_bytes(t, dtype) for _, t in bucket)
                    chunks += 1
        except BaseException:
            with contextlib.suppress(Exception):
                self.client.finish_weight_update()
            raise
        self.client.finish_weight_update()
        self.last_bytes, self.last_chunks = sent, chunks


class RegistersBucketEngine:
    """A ``worker_extension_cls`` with no methods: importing this module in vLLM's worker process
    registers :data:`BUCKETS_BACKEND` there before the worker builds its transfer engine."""


def register() -> None:
    """Register :data:`BUCKETS_BACKEND` with both of vLLM's factories (once per process)."""
    with contextlib.suppress(ValueError):  # "already registered"
        WeightTransferEngineFactory.register_engine(BUCKETS_BACKEND, BucketWeightTransferEngine)
    with contextlib.suppress(ValueError):
        WeightTransferTrainerFactory.register_engine(BUCKETS_BACKEND, BucketTrainerEngine)


register()
