"""release_free_heap gives freed heap pages back: a process that freed 256 MiB of mid-size blocks
(below glibc's mmap threshold, pinned under a live block) holds them until it is called. A fixed
mmap threshold returns large blocks when freed; keep_freed_memory keeps every freed block for reuse
without page faults."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

RSS_MIB = r"""
import os

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
"""
"""``rss_mib()``, the resident set in MiB: run ahead of each program below."""

PROGRAM = r"""
import sys
from codea1.engine.host_memory import _malloc_trim, release_free_heap

if _malloc_trim() is None:
    print("no-trim")
    sys.exit(0)
chunk = b"x" * 65536
blocks = [bytearray(chunk) for _ in range(4096)]  # 256 MiB in 64 KiB blocks, on the heap
pin = bytearray(chunk)  # a live block above them: free() alone cannot shrink the heap's top
base = rss_mib()
del blocks
freed = rss_mib()
release_free_heap()
print(f"{base:.0f} {freed:.0f} {rss_mib():.0f}")
"""


def test_freed_heap_pages_go_back_only_when_asked() -> None:
    done = subprocess.run(
        [sys.executable, "-c", RSS_MIB + PROGRAM], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    if done.stdout.strip() == "no-trim":
        pytest.skip("this C library has no malloc_trim (not glibc)")
    base, freed, trimmed = (float(x) for x in done.stdout.split())
    assert freed > base - 64  # freeing alone kept (almost) all 256 MiB resident
    assert trimmed < freed - 192  # the trim returned them


MAPPED_PROGRAM = r"""
import sys
from codea1.engine.host_memory import map_large_blocks

if sys.argv[1] == "mapped" and not map_large_blocks(128 * 1024):
    print("no-mallopt")
    sys.exit(0)
big = bytearray(8 * 2**20)
del big  # glibc's default threshold now rises to 8 MiB: smaller blocks stay in the heap
base = rss_mib()
blocks = [bytearray(2**20) for _ in range(512)]  # 512 MiB in 1 MiB blocks
grown = rss_mib()
del blocks[::2]  # 256 MiB freed, each block between two live ones: no heap top to trim
print(f"{base:.0f} {grown:.0f} {rss_mib():.0f}")
"""


def _mallopt_program(program: str, mode: str) -> tuple[float, ...] | None:
    """The numbers ``program`` prints when run with ``mode`` in a fresh process, or None where the C
    library has no ``mallopt`` (the program says ``no-mallopt``)."""
    done = subprocess.run(
        [sys.executable, "-c", RSS_MIB + program, mode], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    if done.stdout.strip() == "no-mallopt":
        return None
    return tuple(float(x) for x in done.stdout.split())


def test_a_fixed_mmap_threshold_returns_freed_blocks_at_once() -> None:
    mapped = _mallopt_program(MAPPED_PROGRAM, "mapped")
    if mapped is None:
        pytest.skip("this C library has no mallopt mmap threshold (not glibc)")
    default = _mallopt_program(MAPPED_PROGRAM, "default")
    assert default is not None
    for base, grown, _ in (mapped, default):
        assert grown > base + 448  # both held the 512 MiB while they lived
    assert default[2] > default[1] - 64  # the default kept the freed blocks in the heap
    assert mapped[2] < mapped[1] - 192  # mapped blocks went back when freed, no trim needed


def test_the_threshold_is_bounded_in_the_config_and_the_call() -> None:
    from codea1.config import CPU_MMAP_THRESHOLD_MAX, ConfigError, load_config
    from codea1.engine.host_memory import map_large_blocks

    for bad in (-1, CPU_MMAP_THRESHOLD_MAX + 1):
        with pytest.raises(ConfigError, match=r"engine.cpu_mmap_threshold must be in \[0, ") as raised:
            load_config("tiny-cpu", [f"engine.cpu_mmap_threshold={bad}"])
        assert "cpu_heap" not in str(raised.value)  # one error: the range, not also tiny-cpu's keep
        with pytest.raises(ValueError, match="mmap threshold"):
            map_large_blocks(bad)
    assert load_config("demo-cpu", ["engine.cpu_mmap_threshold=131072"]).engine.cpu_mmap_threshold == 131072


def test_loading_a_model_to_train_sets_the_threshold_first(monkeypatch: pytest.MonkeyPatch) -> None:
    from codea1.config import EngineConfig
    from codea1.engine.hf_local import roles

    calls: list[object] = []
    monkeypatch.setattr(roles, "map_large_blocks", lambda n: calls.append(n) or True)
    monkeypatch.setattr(roles, "load_model_and_tokenizer", lambda *a: calls.append("load") or ("m", "t"))
    assert roles.load_trainable(EngineConfig(cpu_mmap_threshold=131072), "any") == ("m", "t")
    assert calls == [131072, "load"]
    calls.clear()
    roles.load_trainable(EngineConfig(), "any")
    assert calls == ["load"]  # 0: glibc's default is left alone


KEEP_PROGRAM = r"""
import resource
import sys
from codea1.engine.host_memory import keep_freed_memory, release_free_heap

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

if sys.argv[1] == "keep" and not keep_freed_memory():
    print("no-mallopt")
    sys.exit(0)
base = rss_mib()
big = bytearray(b"x") * (64 * 2**20)  # 64 MiB, every page written: above any mmap threshold
held = rss_mib()
del big
release_free_heap()
freed = rss_mib()
before = faults()
again = bytearray(b"y") * (64 * 2**20)  # the same size again
print(f"{base:.0f} {held:.0f} {freed:.0f} {faults() - before}")
"""


def _huge_pages_always() -> bool:
    """Transparent huge pages for every mapping: a fresh 64 MiB mapping then faults in 2 MiB pages."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[always]" in f.read()
    except OSError:
        return False


def test_a_process_that_keeps_freed_memory_reuses_it_without_page_faults() -> None:
    if _huge_pages_always():
        pytest.skip(
            "transparent huge pages are always on: a returned block's faults are not counted per page"
        )
    kept = _mallopt_program(KEEP_PROGRAM, "keep")
    if kept is None:
        pytest.skip("this C library has no mallopt (not glibc)")
    default = _mallopt_program(KEEP_PROGRAM, "return")
    assert default is not None
    for base, held, _, _ in (kept, default):
        assert held > base + 60  # both wrote the 64 MiB
    pages = 64 * 2**20 // os.sysconf("SC_PAGE_SIZE")
    assert default[2] < default[1] - 48  # glibc's default: the freed block went back at once
    assert default[3] > pages // 2  # and was faulted in again, page by page
    assert kept[2] > kept[1] - 4  # kept: neither free nor release_free_heap gave it back
    assert kept[3] < pages // 16  # and the same size again reused its pages


def test_keeping_freed_memory_excludes_a_mmap_threshold() -> None:
    from codea1.config import ConfigError, load_config

    with pytest.raises(
        ConfigError, match="set engine.cpu_mmap_threshold=0 to keep, or engine.cpu_heap=return"
    ):
        load_config("demo-cpu", ["engine.cpu_heap=keep", "engine.cpu_mmap_threshold=4194304"])
    with pytest.raises(ConfigError, match="engine.cpu_heap=keep maps no block"):
        load_config("tiny-cpu", ["engine.cpu_mmap_threshold=4194304"])  # tiny-cpu keeps
    with pytest.raises(ConfigError, match="engine.cpu_heap=keep maps no block"):
        load_config("qwen-coder-0.5b-cpu", ["engine.coder_model=unused", "engine.cpu_heap=keep"])  # 4 MiB
    qwen = ["engine.coder_model=unused", "engine.cpu_heap=keep", "engine.cpu_mmap_threshold=0"]
    assert load_config("qwen-coder-0.5b-cpu", qwen).engine.cpu_heap == "keep"
    assert load_config("tiny-cpu", ["engine.cpu_heap=return", "engine.cpu_mmap_threshold=4194304"])
    with pytest.raises(ConfigError, match="engine.cpu_heap"):
        load_config("tiny-cpu", ["engine.cpu_heap=sometimes"])
    assert load_config("demo-cpu", ["engine.cpu_heap=keep"]).engine.cpu_heap == "keep"


def test_loading_a_model_to_train_keeps_freed_memory_first_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from codea1.config import EngineConfig
    from codea1.engine.hf_local import roles

    calls: list[object] = []
    monkeypatch.setattr(roles, "keep_freed_memory", lambda: calls.append("keep") or True)
    monkeypatch.setattr(roles, "map_large_blocks", lambda n: calls.append(n) or True)
    monkeypatch.setattr(roles, "load_model_and_tokenizer", lambda *a: calls.append("load") or ("m", "t"))
    roles.load_trainable(EngineConfig(cpu_heap="keep", device="cpu"), "any")
    assert calls == ["keep", "load"]
    calls.clear()
    monkeypatch.setattr(roles, "pick_device", lambda d: torch.device("cuda"))
    roles.load_trainable(EngineConfig(cpu_heap="keep", device="cuda"), "any")
    assert calls == ["load"]  # a model trained on a GPU leaves the host's allocator alone


TCMALLOC_PROGRAM = r"""
import resource
import sys
from codea1.engine.host_memory import (
    keep_freed_memory, map_large_blocks, release_free_heap, tcmalloc_loaded,
)

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

knobs = (map_large_blocks(4 * 2**20), keep_freed_memory()) if tcmalloc_loaded() else (map_large_blocks(4 * 2**20),)
block = bytearray(b"x") * (16 * 2**20)  # 16 MiB, every page written; the first one faults in
del block
release_free_heap()
before = faults()
for _ in range(20):  # a learner's micro-batches: the same activations freed and asked for again
    block = bytearray(b"y") * (16 * 2**20)
    del block
    release_free_heap()
print(tcmalloc_loaded(), *knobs, faults() - before)
"""


def test_tcmalloc_reuses_freed_blocks_where_glibc_faults_them_in_again() -> None:
    """What ``engine.cpu_malloc: tcmalloc`` is for: a block the size of an update's activations,
    freed and asked for again 20 times, costs TCMalloc no page faults; glibc with the 0.5B preset's
    4 MiB mmap threshold faults every page of it in every time. In the TCMalloc process glibc's
    knobs are refused (they would do nothing there)."""
    from codea1.engine.host_memory import tcmalloc_library

    library = tcmalloc_library()
    if library is None:
        pytest.skip("no TCMalloc library (apt install libtcmalloc-minimal4)")
    if _huge_pages_always():
        pytest.skip("transparent huge pages are always on: faults are not counted per page")
    runs = {}
    for name, env in (("tcmalloc", {"LD_PRELOAD": library}), ("glibc", {})):
        base = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        done = subprocess.run([sys.executable, "-c", TCMALLOC_PROGRAM], env={**base, **env},
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        runs[name] = done.stdout.split()
    pages = 16 * 2**20 // os.sysconf("SC_PAGE_SIZE")
    assert runs["tcmalloc"][:3] == ["True", "False", "False"]  # loaded; mmap threshold and keep refused
    assert runs["glibc"][:2] == ["False", "True"]  # not loaded; glibc took the threshold
    assert int(runs["glibc"][2]) > 20 * pages // 2  # every block mapped afresh and faulted in
    assert int(runs["tcmalloc"][3]) < pages  # all 20 together less than one block's pages
