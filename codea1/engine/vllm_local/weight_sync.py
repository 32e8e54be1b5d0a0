"""Weight sync into a vLLM engine that runs in other processes: bounded buckets in the rollout dtype.

vLLM's multiprocess engine (its normal mode, used on CUDA) keeps the model in worker processes that
``LLM.collective_rpc`` reaches through msgpack messages. A ``torch.Tensor`` does not survive that
trip as an argument, a file would cost a copy of the model per replica in ``/dev/shm``, and a
pickled function needs ``VLLM_ALLOW_INSECURE_SERIALIZATION``. So the engine is started with
:class:`WeightSyncExtension` as its ``worker_extension_cls`` and a sync is three kinds of calls
by name:

1. ``codea1_sync_begin``: vLLM's layer-wise reload starts (each layer's kernel tensors are set
   aside and its loaders buffer what arrives);
2. ``codea1_sync_bucket`` once per bucket: :func:`pack` casts consecutive tensors to the engine's
   dtype (bf16 on GPU while the learner holds fp32) into one buffer of at most ``bucket_bytes``
   (a tensor larger than that travels alone), sent as ``bytes``; the worker unpacks views of it and
   calls the model's ``load_weights`` (Hugging Face names; vLLM fuses q/k/v and gate/up; a layer
   is processed, on CPU repacked, as soon as all its tensors have arrived);
3. ``codea1_sync_finish``: the layer-wise reload ends (layers given no tensor get theirs back), the
   LoRA/encoder caches derived from the weights are dropped, and an output head tied to the
   embedding is rebuilt (:func:`repack_tied_head`).

This is the protocol of vLLM's own ``ipc`` weight-transfer backend with a portable payload: it runs
on CPU (tested with the engine core in its own process) and CUDA; with tensor parallelism every
worker receives the bucket and loads its shard of it (not tested). Memory held at once: about two
buckets on the sender (the packed buffer and msgpack's message), one or two on each worker (tensors
of a layer split across two buckets wait for the rest of the layer). Nothing goes to disk.

Imports: torch, vllm (inside the worker methods), this package's console.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from codea1.engine.vllm_local.console import expected_reload_warnings_hidden

WEIGHT_SYNC_EXTENSION = "codea1.engine.vllm_local.weight_sync.WeightSyncExtension"
"""The ``worker_extension_cls`` an engine needs for :func:`send_in_buckets`."""
BUCKET_BYTES = 256 << 20
"""Default upper bound of one bucket (a single larger tensor is sent alone)."""
ALIGN = 64
"""Byte alignment of each tensor inside a packed bucket."""

TensorMeta = tuple[str, str, tuple[int, ...], int]
"""One tensor of a packed bucket: name, dtype name (``bfloat16``), shape, byte offset."""


def wire_dtype(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    """The dtype ``tensor`` travels in: ``dtype`` for floating-point tensors, its own otherwise."""
    return dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype


def wire_bytes(tensor: torch.Tensor, dtype: torch.dtype | None) -> int:
    """Bytes of ``tensor`` in the dtype it travels in."""
    return tensor.numel() * wire_dtype(tensor, dtype).itemsize


def buckets(
    weights: Mapping[str, torch.Tensor], dtype: torch.dtype | None, max_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive runs of ``weights`` (in their order) of at most ``max_bytes`` once in ``dtype``;
    a tensor larger than ``max_bytes`` is a bucket of its own."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in weights.items():
        n = _aligned(wire_bytes(tensor, dtype))
        if bucket and size + n > max_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += n
    if bucket:
        yield bucket


def pack(
    items: Sequence[tuple[str, torch.Tensor]], dtype: torch.dtype | None
) -> tuple[list[TensorMeta], memoryview]:
    """One CPU buffer holding every tensor of ``items`` cast to ``dtype`` (floating point only),
    and where each lies in it. Tensors may live on any device; each is cast and copied once."""
    meta: list[TensorMeta] = []
    offset = 0
    for name, tensor in items:
        wire = wire_dtype(tensor, dtype)
        meta.append((name, _dtype_name(wire), tuple(tensor.shape), offset))
        offset += _aligned(tensor.numel() * wire.itemsize)
    buffer = torch.empty(offset, dtype=torch.uint8)
    for (_, dname, shape, start), (_, tensor) in zip(meta, items, strict=True):
        src = tensor.detach()
        if src.device.type != "cpu":  # cast on the device: only the wire dtype's bytes reach the host
            src = src.to(getattr(torch, dname))
        _view(buffer, dname, shape, start).copy_(src)  # on the CPU the cast happens in the copy
    return meta, memoryview(buffer.numpy())


def unpack(meta: Sequence[Sequence[Any]], blob: bytes | memoryview) -> list[tuple[str, torch.Tensor]]:
    """The tensors :func:`pack` put in ``blob`` (msgpack delivers it as ``bytes``), as views of it."""
    if not blob:
        return [
            (str(name), torch.empty(tuple(shape), dtype=getattr(torch, dname)))
            for name, dname, shape, _ in meta
        ]
    with warnings.catch_warnings():  # views of an immutable bytes object: the loaders only read them
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        buffer = torch.frombuffer(blob, dtype=torch.uint8)
    return [
        (str(name), _view(buffer, str(dname), tuple(shape), int(start))) for name, dname, shape, start in meta
    ]


def send_in_buckets(
    llm: Any, weights: Mapping[str, torch.Tensor], dtype: torch.dtype | None, max_bytes: int
) -> tuple[int, int]:
    """Load ``weights`` into a multiprocess engine started with :data:`WEIGHT_SYNC_EXTENSION`, one
    bucket per call; returns (bytes of the tensors in the dtype they travelled in, buckets). The
    reload is closed even when a bucket fails."""
    sent = count = 0
    llm.collective_rpc("codea1_sync_begin")
    try:
        for bucket in buckets(weights, dtype, max_bytes):
            meta, blob = pack(bucket, dtype)
            llm.collective_rpc("codea1_sync_bucket", args=(meta, blob))
            sent += sum(wire_bytes(t, dtype) for _, t in bucket)
            count += 1
    finally:
        llm.collective_rpc("codea1_sync_finish")
    return sent, count


def repack_tied_head(worker: Any) -> bool:
    """Rebuild the CPU kernel of an output head tied to the input embedding; True when it did.

    With tied embeddings the checkpoint has no ``lm_head.weight``, so a reload writes the new
    embedding into the shared tensor but never reprocesses the head, whose CPU matmul still runs on
    the weights packed at start-up (seen as a 0.68 log-prob gap after a sync before this). On CUDA
    the head reads the shared tensor itself and reprocessing it changes nothing.
    """
    model = worker.model_runner.get_model()
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if head is None or embed is None or head.weight.data_ptr() != embed.weight.data_ptr():
        return False
    head.quant_method.process_weights_after_loading(head)
    return True


class WeightSyncExtension:
    """Methods vLLM mixes into its worker class (``worker_extension_cls``) for a sync in buckets.

    ``self`` is vLLM's worker (``vllm_config``, ``model_runner``). Calls arrive in order
    begin, bucket..., finish, with no request scheduled in between (the policy samples and syncs
    from one thread).
    """

    vllm_config: Any
    model_runner: Any

    def codea1_sync_begin(self) -> None:
        """Start a layer-wise reload: set the kernel tensors aside, buffer incoming weights."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        with set_current_vllm_config(self.vllm_config):
            initialize_layerwise_reload(self.model_runner.get_model())

    def codea1_sync_bucket(self, meta: list[TensorMeta], blob: bytes | memoryview) -> int:
        """Load one packed bucket (Hugging Face names); returns the bytes received."""
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(self.vllm_config):
            self.model_runner.get_model().load_weights(unpack(meta, blob))
        return memoryview(blob).nbytes

    def codea1_sync_finish(self) -> bool:
        """End the reload, drop caches derived from the old weights, rebuild a tied head; returns
        whether a tied head was rebuilt."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        runner = self.model_runner
        with set_current_vllm_config(self.vllm_config), expected_reload_warnings_hidden():
            finalize_layerwise_reload(runner.get_model(), self.vllm_config.model_config)
        for reset in ("reset_lora_state", "reset_encoder_cache", "reset_mm_cache"):
            getattr(runner, reset, lambda: None)()
        return repack_tied_head(self)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _view(buffer: torch.Tensor, dtype_name: str, shape: tuple[int, ...], start: int) -> torch.Tensor:
    dtype = getattr(torch, dtype_name)
    numel = 1
    for d in shape:
        numel *= d
    return buffer[start : start + numel * dtype.itemsize].view(dtype).view(shape)
