"""Weight sync into a vLLM engine: which of vLLM's weight-transfer backends, and codea1's buckets.

Every sync goes through vLLM's weight-transfer API (``vllm.distributed.weight_transfer``):
``LLM.start_weight_update`` → ``LLM.update_weights`` per chunk → ``LLM.finish_weight_update``, the
worker's engine built by ``WeightTransferEngineFactory`` from the backend the engine was started
with (``weight_transfer_config``). :func:`select_backend` picks it:

- on CUDA, vLLM's own engines: ``ipc`` (CUDA IPC handles, no copy) where the trainer holds the
  weights on the GPU the engine runs on (the local backend; Ray ``colocate`` when every replica
  shares its GPU with a learner rank), ``nccl`` (a broadcast from the learner group's rank 0) for
  Ray ``split``; **neither has run on a GPU yet** (docs/cluster.md);
- everywhere else — the CPU, in-process or not, and the Ray replicas of ``adapters`` mode, which
  merge the adapters into a base they hold on the host — :data:`BUCKETS_BACKEND`, codea1's own engine
  registered with vLLM's factory (``bucket_engine``).

A bucket of :data:`BUCKETS_BACKEND` across processes: :func:`pack` casts consecutive tensors to
the wire dtype (bf16 on GPU while the learner holds fp32) into one buffer of at most
``bucket_bytes`` (a tensor larger than that travels alone), sent as ``bytes`` through vLLM's msgpack
RPC; the worker unpacks views of it. Memory held at once: about two buckets on the sender (the
packed buffer and msgpack's message), one or two on each worker (tensors of a layer split across two
buckets wait for the rest of the layer). Nothing goes to disk. In-process the tensors themselves
are the one chunk.

Imports: torch.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import torch

BUCKETS_BACKEND = "codea1_buckets"
"""codea1's weight-transfer backend (``bucket_engine``): bounded buckets over vLLM's RPC, or the
tensors themselves in-process; runs on CPU and CUDA."""
REGISTERING_EXTENSION = "codea1.engine.vllm_local.bucket_engine.RegistersBucketEngine"
"""The ``worker_extension_cls`` of an engine that uses :data:`BUCKETS_BACKEND` across processes: its
import registers the engine in vLLM's worker process (``bucket_engine``)."""
BUCKET_BYTES = 256 << 20
"""Default upper bound of one bucket (a single larger tensor is sent alone). vLLM's packed ``ipc``
producer refuses a tensor larger than its staging buffer instead: :func:`staging_bytes` grows the
buffer to the largest tensor of a round (a paper model's bf16 embedding is 467 MB at 1.5B, 622 MB
at 3B, 1.09 GB at 7B)."""
ALIGN = 64
"""Byte alignment of each tensor inside a packed bucket."""

TensorMeta = tuple[str, str, tuple[int, ...], int]
"""One tensor of a packed bucket: name, dtype name (``bfloat16``), shape, byte offset."""


Backend = Literal["codea1_buckets", "ipc", "nccl"]
DIRECT_BACKENDS = ("ipc", "nccl")
"""vLLM's own CUDA backends: the trainer drives them with its tensors on the GPU."""


def select_backend(
    *, cuda: bool, placement: str | None = None, full_weights: bool = True, learner_on_every_gpu: bool = True
) -> Backend:
    """The weight-transfer backend of one vLLM engine.

    ``cuda``: the engine runs on a GPU. ``placement``: None for the local backend (learners and
    engines on one GPU, in one process and vLLM's workers), else the Ray layout (``split`` or
    ``colocate``). ``full_weights``: the trainer sends full weights from a learner on the GPU (Ray
    ``adapters`` replicas merge on the host instead). ``learner_on_every_gpu``: under ``colocate``,
    every replica shares its GPU with a learner rank (``rollout_replicas <= learner_workers``), which
    CUDA IPC needs; a ``colocate`` layout without it is a ``ValueError``: NCCL needs every rank on a
    device of its own, and replica ``i`` shares learner rank ``i``'s GPU (``ray_cluster.placement``).
    """
    if not cuda:
        return BUCKETS_BACKEND
    if placement is None:
        return "ipc"
    if not full_weights:
        return BUCKETS_BACKEND
    if placement == "colocate":
        if not learner_on_every_gpu:  # config.check_invariants refuses this layout first
            raise ValueError(
                "placement colocate with more replicas than learner ranks: NCCL would join learner rank 0 "
                "and replica 0 on one GPU, and CUDA IPC cannot reach the replicas on GPUs of their own"
            )
        return "ipc"
    return "nccl"


def wire_dtype(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    """The dtype ``tensor`` travels in: ``dtype`` for floating-point tensors, its own otherwise."""
    return dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype


def wire_bytes(tensor: torch.Tensor, dtype: torch.dtype | None) -> int:
    """Bytes of ``tensor`` in the dtype it travels in."""
    return tensor.numel() * wire_dtype(tensor, dtype).itemsize


def largest_wire_bytes(weights: Mapping[str, torch.Tensor], dtype: torch.dtype | None) -> int:
    """Bytes of the largest tensor of ``weights`` in the dtype it travels in (0 when there is none);
    a sharded (FSDP2 DTensor) tensor counts whole, as it is gathered before it is sent."""
    return max((wire_bytes(t, dtype) for t in weights.values()), default=0)


def staging_bytes(weights: Mapping[str, torch.Tensor], dtype: torch.dtype | None, bucket_bytes: int) -> int:
    """The staging buffer of vLLM's packed transfer for ``weights``: ``bucket_bytes``, or the largest
    tensor in its wire dtype when that is larger (vLLM's ``packed_ipc_producer`` raises
    ``ValueError`` for a tensor larger than its buffer)."""
    return max(bucket_bytes, largest_wire_bytes(weights, dtype))


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


def repack_tied_head(model: Any) -> bool:
    """Rebuild the CPU kernel of an output head tied to the input embedding; True when it did.

    With tied embeddings the checkpoint has no ``lm_head.weight``, so a reload writes the new
    embedding into the shared tensor but never reprocesses the head, whose CPU matmul still runs on
    the weights packed at start-up (seen as a 0.68 log-prob gap after a sync before this). On CUDA
    the head reads the shared tensor itself and reprocessing it changes nothing.
    """
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if head is None or embed is None or head.weight.data_ptr() != embed.weight.data_ptr():
        return False
    head.quant_method.process_weights_after_loading(head)
    return True


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
