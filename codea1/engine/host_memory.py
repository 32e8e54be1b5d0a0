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

Both return memory that the next phase, or the next micro-batch, asks for again, and every page of
it is faulted back in: a tiny-cpu fp32 update faulted 1.3-1.7 M pages (5-7 GB) and spent 14-20 % of
its CPU time in the kernel. :func:`keep_freed_memory` (``engine.cpu_heap: keep``) is the other
choice: every block comes from the heap, the heap is never trimmed, and an update reuses the last
one's pages (docs/LOG.md, 2026-12-05).

These are glibc's knobs. A process can instead run on TCMalloc (``engine.cpu_malloc: tcmalloc``;
``codea1 train`` restarts itself with the library preloaded, :mod:`codea1.cli.malloc_relaunch`):
its page heap reuses freed spans of any size without faulting them in again and without glibc's
fragmentation, so a Qwen2.5-Coder-0.5B a1 step kept its 5.78 GiB peak and lost 85 % of its system
time (docs/LOG.md, 2026-12-06). In such a process the functions here leave the allocator alone.

Imports: ctypes, ctypes.util, os, config.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
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


M_TRIM_THRESHOLD = -1
"""glibc's ``mallopt`` parameter number of the free space at the heap's top that ``free`` trims."""
M_MMAP_MAX = -4
"""glibc's ``mallopt`` parameter number of the most blocks that get mappings of their own."""
NO_TRIM = -1
"""``M_TRIM_THRESHOLD`` -1 (read as the largest ``size_t``): ``free`` never trims the heap's top."""

_keeps_freed_memory = False
"""Whether :func:`keep_freed_memory` took effect in this process (then nothing is trimmed)."""


TCMALLOC_LIBRARY_ENV = "CODEA1_TCMALLOC"
"""Names the TCMalloc library to preload where the linker's cache does not list it (a path)."""
TCMALLOC_INSTALL = "apt install libtcmalloc-minimal4, or set CODEA1_TCMALLOC to the library's path"
"""How a user gets TCMalloc (Debian and Ubuntu's package; ``gperftools`` elsewhere)."""
TCMALLOC_SYMBOL = "tc_malloc"
"""A function only TCMalloc defines: found in the process's global symbols when it is loaded."""


def tcmalloc_loaded() -> bool:
    """Whether this process allocates through TCMalloc (preloaded, so it replaced ``malloc``)."""
    return _libc_function(TCMALLOC_SYMBOL) is not None


def tcmalloc_library() -> str | None:
    """What to put in ``LD_PRELOAD`` for TCMalloc: :data:`TCMALLOC_LIBRARY_ENV` when set and it names
    a shared library (an ELF shared object), else the linker cache's ``libtcmalloc_minimal`` (or the
    full ``libtcmalloc``); None when there is none (:func:`tcmalloc_named_problem` says what is wrong
    with a library the variable names)."""
    named = os.environ.get(TCMALLOC_LIBRARY_ENV, "").strip()
    if named:
        return named if _named_library_problem(named) is None else None
    return ctypes.util.find_library("tcmalloc_minimal") or ctypes.util.find_library("tcmalloc")


def tcmalloc_named_problem() -> str | None:
    """What is wrong with the library :data:`TCMALLOC_LIBRARY_ENV` names (``CODEA1_TCMALLOC=PATH: no
    such file``); None when the variable is unset or names a shared library."""
    named = os.environ.get(TCMALLOC_LIBRARY_ENV, "").strip()
    if named and (problem := _named_library_problem(named)):
        return f"{TCMALLOC_LIBRARY_ENV}={named}: {problem}"
    return None


_ELF_MAGIC = b"\x7fELF"
_ELF_SHARED_OBJECT = 3
"""``e_type`` of a shared object (``ET_DYN``), the 2 bytes at offset 16 of an ELF header."""


def _named_library_problem(path: str) -> str | None:
    """Why ``path`` cannot be preloaded as a library (None when it is an ELF shared object)."""
    if not os.path.exists(path):
        return "no such file"
    if not os.path.isfile(path):
        return "not a regular file"
    try:
        with open(path, "rb") as f:
            header = f.read(18)
    except OSError as e:
        return f"not readable ({e.strerror or e})"
    if len(header) < 18 or not header.startswith(_ELF_MAGIC):
        return "not a shared library (no ELF header)"
    byte_order = "little" if header[5] == 1 else "big"
    if int.from_bytes(header[16:18], byte_order) != _ELF_SHARED_OBJECT:
        return "an ELF file but not a shared library"
    return None


def release_free_heap() -> None:
    """Give the C heap's free pages back to the operating system (glibc; a no-op elsewhere, in a
    process that keeps its freed memory, and on TCMalloc, which returns its free spans itself).
    Called by the CPU engines after each update, log-prob pass and rollout."""
    trim = _malloc_trim()
    if trim is not None and not _keeps_freed_memory and not tcmalloc_loaded():
        trim(0)


def keep_freed_memory() -> bool:
    """Keep the host memory this process frees, for its next allocations, for the rest of the
    process: glibc maps no block on its own (``M_MMAP_MAX`` 0), ``free`` trims nothing from the
    heap's top, and :func:`release_free_heap` becomes a no-op. A block freed by one micro-batch or
    update is then reused by the next without page faults; the resident set stays at the heap's
    peak. Returns whether the C library took it (False elsewhere than glibc, and on TCMalloc)."""
    global _keeps_freed_memory
    mallopt = _libc_function("mallopt")
    if mallopt is None or tcmalloc_loaded():
        return False
    took = mallopt(ctypes.c_int(M_MMAP_MAX), ctypes.c_int(0)) == 1
    took = took and mallopt(ctypes.c_int(M_TRIM_THRESHOLD), ctypes.c_int(NO_TRIM)) == 1
    _keeps_freed_memory = _keeps_freed_memory or took
    return took


def map_large_blocks(threshold: int) -> bool:
    """Have glibc give every heap block of at least ``threshold`` bytes (at most
    :data:`~codea1.config.CPU_MMAP_THRESHOLD_MAX`) a mapping of its own, unmapped when it is freed, for the rest of this
    process; its default threshold rises as large blocks are freed. Returns whether the C library
    took it (False elsewhere than glibc, and on TCMalloc)."""
    if not 0 < threshold <= CPU_MMAP_THRESHOLD_MAX:
        raise ValueError(f"mmap threshold must be in (0, {CPU_MMAP_THRESHOLD_MAX}] bytes, got {threshold}")
    mallopt = _libc_function("mallopt")
    return (
        mallopt is not None
        and not tcmalloc_loaded()
        and mallopt(ctypes.c_int(M_MMAP_THRESHOLD), ctypes.c_int(threshold)) == 1
    )
