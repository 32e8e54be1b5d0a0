"""No new namespace, at load time (F1) or in a test (F1 + F2): ``clone(2)`` with any ``CLONE_NEW*``
flag is refused (EPERM) and ``clone3(2)`` answers ENOSYS, while fork (at load time) and threads
still work (issue 35, item 3). Tried through raw ``syscall(2)`` in forked children, then through the
sandbox with the selftest's two attacks."""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Callable

import pytest

from codea1.config import SandboxConfig
from codea1.sandbox import Sandbox
from codea1.sandbox.attacks import NAMESPACE_ATTACKS, run_suite
from codea1.sandbox.worker import seccomp

NAMESPACES = {
    "user": 0x10000000,
    "mount": 0x00020000,
    "pid": 0x20000000,
    "net": 0x40000000,
    "ipc": 0x08000000,
    "uts": 0x04000000,
    "cgroup": 0x02000000,
}
SIGCHLD, CLONE_THREAD, NR_CLONE, NR_CLONE3 = 17, 0x00010000, 56, 435

needs_seccomp = pytest.mark.skipif(bool(seccomp.unavailable_reason()), reason="seccomp unavailable here")

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc["syscall"]
_syscall.restype = ctypes.c_long


def _outcome(ret: int) -> int:
    """0 when a child was created (it exits at once), else the errno of the refusal."""
    if ret == 0:
        os._exit(0)
    if ret > 0:
        os.waitpid(ret, 0)
        return 0
    return ctypes.get_errno()


def _clone(flags: int) -> int:
    ctypes.set_errno(0)
    return _outcome(_syscall(ctypes.c_long(NR_CLONE), ctypes.c_ulong(flags), *[ctypes.c_ulong(0)] * 4))


def _clone3(flags: int) -> int:
    args = (ctypes.c_uint64 * 8)(flags, 0, 0, 0, SIGCHLD, 0, 0, 0)  # struct clone_args, version 0
    ctypes.set_errno(0)
    return _outcome(_syscall(ctypes.c_long(NR_CLONE3), args, ctypes.c_size_t(64)))


def _thread_runs() -> bool:
    box: list[int] = []
    t = threading.Thread(target=box.append, args=(1,))
    t.start()
    t.join()
    return box == [1]


def _in_child(fn: Callable[[], int]) -> int:
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = fn()
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _install(phase: str) -> None:
    seccomp.install(seccomp.program_filter([]))
    if phase == "call":
        seccomp.install(seccomp.test_filter(os.getpid()))


@needs_seccomp
@pytest.mark.parametrize("phase", ["load", "call"])
@pytest.mark.parametrize("name", sorted(NAMESPACES))
def test_no_namespace_flag_gets_through_clone_or_clone3(phase: str, name: str) -> None:
    flag = NAMESPACES[name]

    def body() -> int:
        _install(phase)
        if _clone(flag | SIGCHLD) != errno.EPERM:  # a child in a new namespace
            return 1
        if _clone(flag | CLONE_THREAD) != errno.EPERM:  # thread form (the kernel alone: EINVAL)
            return 2
        if _clone3(flag) != errno.ENOSYS:  # libc falls back to clone
            return 3
        return 0

    assert _in_child(body) == 0


@needs_seccomp
def test_fork_and_threads_still_work_where_they_did() -> None:
    def body() -> int:
        _install("load")
        if _clone(SIGCHLD) != 0 or not _thread_runs():
            return 1
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        seccomp.install(seccomp.test_filter(os.getpid()))
        if not _thread_runs():  # clone3 -> ENOSYS, then clone with CLONE_THREAD
            return 2
        return 0 if _clone(SIGCHLD) == errno.EPERM else 3

    assert _in_child(body) == 0


@needs_seccomp
def test_the_sandbox_refuses_namespaces_at_load_and_at_call() -> None:
    with Sandbox(SandboxConfig(workers=1, test_cpu_s=2.0, load_cpu_s=2.0)) as sandbox:
        results = run_suite(sandbox, NAMESPACE_ATTACKS, harness_attacks=())
    escaped = [f"{r.name}: {r.detail} [{r.verdicts}]" for r in results if not r.contained]
    assert not escaped, "\n".join(escaped)
    assert {r.name for r in results} >= {a.name for a in NAMESPACE_ATTACKS}
