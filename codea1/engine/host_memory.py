"""Freed host memory handed back to the operating system after each engine phase on a CPU.

glibc keeps the memory of freed blocks below its mmap threshold (128 KiB, rising to 32 MiB as large
blocks are freed) in its heap for reuse. A learner update's activations or a CPU vLLM engine's
prefill buffers are mostly such blocks, so after an update or a rollout a gigabyte of free pages
can stay in the process's resident set, on top of which the next phase grows the heap again.
``malloc_trim(0)`` returns the free pages (the heap's layout is unchanged; a page used again is
faulted back in): on the ``demo-cpu`` run it kept the peak resident set at 3.82 GiB where it went
to 3.96 GiB without (docs/LOG.md, 2026-12-03), in no measurable time. Elsewhere than glibc it is a
no-op.

The trim cannot help within a phase: blocks freed during an update are reused in an order that
leaves the heap fragmented, and its peak stays. :func:`map_large_blocks` fixes glibc's mmap
threshold instead, so that blocks of at least that size get a mapping of their own, returned to the
system when freed (``engine.cpu_mmap_threshold``). A Qwen2.5-Coder-0.5B coder update added 5.7-6.8 GB
to the resident set with the default threshold and 2.0 GB with 128 KiB (docs/LOG.md, 2026-12-03).

Imports: ctypes, config.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

from codea1.config import CPU_MMAP_THRESHOLD_MAX

M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number of the mmap threshold (``malloc.h``)."""


@functools.cache
def _libc_function(name: str) -> Callable[..., int] | None:
    """The C library's function ``name``, or None where it has none (musl lacks ``malloc_trim``,
    macOS both)."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    return _libc_function("malloc_trim")


def release_free_heap() -> None:
    """Give the C heap's free pages back to the operating system (glibc; a no-op elsewhere). Called
    by the CPU engines after each update, log-prob pass and rollout."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def map_large_blocks(threshold: int) -> bool:
    """Have glibc give every heap block of at least ``threshold`` bytes (at most
    :data:`~codea1.config.CPU_MMAP_THRESHOLD_MAX`) a mapping of its own, unmapped when it is freed, for the rest of this
    process; its default threshold rises as large blocks are freed. Returns whether the C library
    took it (False elsewhere than glibc)."""
    if not 0 < threshold <= CPU_MMAP_THRESHOLD_MAX:
        raise ValueError(f"mmap threshold must be in (0, {CPU_MMAP_THRESHOLD_MAX}] bytes, got {threshold}")
    mallopt = _libc_function("mallopt")
    return mallopt is not None and mallopt(ctypes.c_int(M_MMAP_THRESHOLD), ctypes.c_int(threshold)) == 1
