"""Freed host memory handed back to the operating system after each engine phase on a CPU.

glibc keeps the memory of freed blocks below its mmap threshold (128 KiB, rising to 32 MiB as large
blocks are freed) in its heap for reuse. A learner update's activations or a CPU vLLM engine's
prefill buffers are mostly such blocks, so after an update or a rollout a gigabyte of free pages
can stay in the process's resident set, on top of which the next phase grows the heap again.
``malloc_trim(0)`` returns the free pages (the heap's layout is unchanged; a page used again is
faulted back in): on the ``demo-cpu`` run it kept the peak resident set at 3.82 GiB where it went
to 3.96 GiB without (docs/LOG.md, 2026-12-03), in no measurable time. Elsewhere than glibc it is a
no-op.

Imports: ctypes only.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def release_free_heap() -> None:
    """Give the C heap's free pages back to the operating system (glibc; a no-op elsewhere). Called
    by the CPU engines after each update, log-prob pass and rollout."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
