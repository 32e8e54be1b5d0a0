"""Landlock file-system (and, from ABI 4, TCP) confinement through raw syscalls via ctypes.

The worker restricts itself once, before it runs any job: read-only access to the interpreter and
system library trees, read-write access to its scratch directory and ``/dev/null``, and (ABI ≥ 4)
no TCP bind/connect. Every descendant inherits the restriction; it cannot be lifted.
"""

from __future__ import annotations

import ctypes
import os
import struct

from codea1.sandbox.worker.probe import denied_in_child

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def abi_version() -> int:
    """The kernel's Landlock ABI version (0 when Landlock is unavailable)."""
    if os.uname().machine != "x86_64":
        return 0
    v = _libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(v) if v > 0 else 0


def _handled_fs(abi: int) -> int:
    mask = (1 << 13) - 1
    if abi >= 2:
        mask |= REFER
    if abi >= 3:
        mask |= TRUNCATE
    if abi >= 5:
        mask |= IOCTL_DEV
    return mask


def restrict_self(read_only: list[str], read_write: list[str]) -> int:
    """Confine the calling process; returns the ABI used. Raises OSError when Landlock refuses."""
    abi = abi_version()
    if abi <= 0:
        raise OSError("Landlock is not available on this kernel")
    fs = _handled_fs(abi)
    if abi >= 4:
        attr = struct.pack("<QQ", fs, _NET_BIND_TCP | _NET_CONNECT_TCP)
    else:
        attr = struct.pack("<Q", fs)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _libc.syscall(_SYS_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        ro = READ_FILE | READ_DIR
        rw = fs & ~(EXECUTE | MAKE_CHAR | MAKE_BLOCK | REFER)
        for path, rights in [(p, ro) for p in read_only] + [(p, rw) for p in read_write]:
            _add_path(int(ruleset), path, rights)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if _libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(int(ruleset)), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(int(ruleset))
    return abi


def _add_path(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path that does not exist here needs no rule
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        attr = struct.pack("<Qi", rights, fd)  # struct landlock_path_beneath_attr is packed
        buf = ctypes.create_string_buffer(attr, len(attr))
        if _libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), buf, 0) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    finally:
        os.close(fd)


def unavailable_reason() -> str:
    """Empty when Landlock works here (probed in a forked child), else why not."""
    abi = abi_version()
    if abi <= 0:
        return "kernel has no Landlock (not built in or not in the LSM list)"
    return denied_in_child(lambda: restrict_self(["/usr"], []), lambda: os.listdir("/"))
