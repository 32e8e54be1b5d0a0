"""Hand-assembled seccomp BPF filters, installed with ``prctl`` through ctypes (x86_64 only).

Two filters (docs/sandbox.md, "Layers"):

* **program** (F1, loaded by the program process before it runs untrusted definitions): denies
  exec; every ``socket(2)`` of any family, and ``bind``/``connect``/``listen``/``accept`` (so no
  pathname, abstract or other host socket can be reached); ``socketpair`` except AF_UNIX
  SOCK_STREAM (a connected, nameless pair: asyncio's self-pipe; a datagram pair could ``sendto`` a
  pathname, a stream one cannot); ptrace and cross-process memory access, mount/namespace/module/
  keyring/bpf/perf/io_uring calls, System V IPC, the setuid family, and signals aimed at the
  trusted processes (pid 1, the job runner and ``-1``). New namespaces: ``unshare``/``setns``
  (above), ``clone`` with any ``CLONE_NEW*`` flag (EPERM), and ``clone3`` (ENOSYS, since seccomp
  cannot read the flags it takes by pointer; libc then falls back to ``clone``, threads included).
* **test** (F2, added by each per-test child): additionally denies fork/vfork, clone without
  ``CLONE_THREAD``, and signals to any process but itself.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from codea1.sandbox.worker.probe import denied_in_child

AUDIT_ARCH_X86_64 = 0xC000003E
_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000

# BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JSET_K = 0x45
_JGE_K = 0x35
_RET_K = 0x06

_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_CLONE_THREAD = 0x00010000
_CLONE_NEW_NAMESPACE = (
    0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
)
"""CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET: every namespace ``clone(2)`` can
create (CLONE_NEWTIME exists for ``unshare`` and ``clone3`` only; in ``clone`` its bit is part of the
exit signal). The kernel reads the low 32 bits of clone's flags, its first argument on x86_64."""
_AF_UNIX = 1

# x86_64 syscall numbers
_DENY_ALWAYS = {
    "execve": 59, "execveat": 322, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "mount": 165, "umount2": 166, "unshare": 272, "setns": 308, "bpf": 321, "perf_event_open": 298,
    "setuid": 105, "setgid": 106, "setreuid": 113, "setregid": 114, "setresuid": 117, "setresgid": 119,
    "setgroups": 116, "setfsuid": 122, "setfsgid": 123, "chroot": 161, "pivot_root": 155, "reboot": 169,
    "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "swapon": 167, "swapoff": 168, "sethostname": 170, "setdomainname": 171,
    "iopl": 172, "ioperm": 173, "keyctl": 250, "add_key": 248, "request_key": 249, "userfaultfd": 323,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "acct": 163, "settimeofday": 164,
    "clock_settime": 227, "adjtimex": 159, "quotactl": 179, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "kcmp": 312, "pidfd_getfd": 438,
    "pidfd_send_signal": 424, "fanotify_init": 300, "personality": 135, "tkill": 200,
    "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsmount": 432, "mknod": 133, "mknodat": 259,
    "shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66, "shmdt": 67,
    "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "semtimedop": 220,
    "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244,
    "mq_getsetattr": 245,
}  # fmt: skip
_DENY_SOCKET_USE = {"socket": 41, "connect": 42, "accept": 43, "bind": 49, "listen": 50, "accept4": 288}
"""No socket of any family may be created: generated code has no use for one, and a pathname UNIX
socket would reach a host service across every namespace (the file system is shared)."""
_NR_SOCKETPAIR = 53
_SOCK_TYPE_MASK, _SOCK_STREAM = 0xF, 1
_ALU_AND_K, _LD_W_ARG1 = 0x54, 24
_NR_KILL, _NR_TGKILL = 62, 234
_NR_CLONE, _NR_CLONE3, _NR_FORK, _NR_VFORK = 56, 435, 57, 58


def _stmt(code: int, k: int) -> bytes:
    return struct.pack("<HBBI", code, 0, 0, k & 0xFFFFFFFF)


def _jump(code: int, k: int, jt: int, jf: int) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _errno(e: int) -> int:
    return _RET_ERRNO | (e & 0xFFFF)


def _deny_arg0_in(nr: int, values: list[int], err: int) -> list[bytes]:
    """``if nr == NR and arg0 in values: return errno`` (then reload nr)."""
    n = len(values)
    out = [_jump(_JEQ_K, nr, 0, n + 3), _stmt(_LD_W_ABS, _OFF_ARG0)]
    for i, v in enumerate(values):
        out.append(_jump(_JEQ_K, v, n - i, 0))  # match -> jump to the RET errno
    out.append(_jump(_JEQ_K, 0, 1, 1))  # unconditional skip of the RET (reload nr next)
    out.append(_stmt(_RET_K, _errno(err)))
    out.append(_stmt(_LD_W_ABS, _OFF_NR))
    return out


def _build(deny_fork: bool, protected_pids: list[int], own_pid: int | None) -> bytes:
    """F1 when ``deny_fork`` is false; F2 (only the extra rules, stacked on F1) otherwise."""
    insns = [
        _stmt(_LD_W_ABS, _OFF_ARCH),
        _jump(_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        _stmt(_RET_K, _RET_KILL_PROCESS),
        _stmt(_LD_W_ABS, _OFF_NR),
        _jump(_JGE_K, 0x40000000, 0, 1),  # x32 ABI
        _stmt(_RET_K, _errno(errno.ENOSYS)),
    ]
    for nr in sorted(set(_DENY_ALWAYS.values())) if not deny_fork else []:
        insns += [_jump(_JEQ_K, nr, 0, 1), _stmt(_RET_K, _errno(errno.EPERM))]
    for nr in sorted(_DENY_SOCKET_USE.values()) if not deny_fork else []:
        insns += [_jump(_JEQ_K, nr, 0, 1), _stmt(_RET_K, _errno(errno.EACCES))]
    if not deny_fork:
        insns += [  # socketpair: only a nameless AF_UNIX stream pair
            _jump(_JEQ_K, _NR_SOCKETPAIR, 0, 7),
            _stmt(_LD_W_ABS, _OFF_ARG0),
            _jump(_JEQ_K, _AF_UNIX, 0, 3),
            _stmt(_LD_W_ABS, _LD_W_ARG1),
            _stmt(_ALU_AND_K, _SOCK_TYPE_MASK),
            _jump(_JEQ_K, _SOCK_STREAM, 1, 0),
            _stmt(_RET_K, _errno(errno.EACCES)),
            _stmt(_RET_K, _RET_ALLOW),
        ]
        insns += [_jump(_JEQ_K, _NR_CLONE3, 0, 1), _stmt(_RET_K, _errno(errno.ENOSYS))]  # flags unreadable
        insns += [  # clone: no new namespace (fork and threads pass)
            _jump(_JEQ_K, _NR_CLONE, 0, 4),
            _stmt(_LD_W_ABS, _OFF_ARG0),
            _jump(_JSET_K, _CLONE_NEW_NAMESPACE, 0, 1),
            _stmt(_RET_K, _errno(errno.EPERM)),
            _stmt(_RET_K, _RET_ALLOW),
        ]
    if deny_fork:
        for nr in (_NR_FORK, _NR_VFORK):
            insns += [_jump(_JEQ_K, nr, 0, 1), _stmt(_RET_K, _errno(errno.EPERM))]
        insns += [
            _jump(_JEQ_K, _NR_CLONE, 0, 4),
            _stmt(_LD_W_ABS, _OFF_ARG0),
            _jump(_JSET_K, _CLONE_THREAD, 0, 1),
            _stmt(_RET_K, _RET_ALLOW),
            _stmt(_RET_K, _errno(errno.EPERM)),
        ]
    if own_pid is not None:  # signals only to itself
        for nr in (_NR_KILL, _NR_TGKILL):
            insns += [
                _jump(_JEQ_K, nr, 0, 4),
                _stmt(_LD_W_ABS, _OFF_ARG0),
                _jump(_JEQ_K, own_pid, 1, 0),
                _stmt(_RET_K, _errno(errno.EPERM)),
                _stmt(_RET_K, _RET_ALLOW),
            ]
    else:
        values = sorted({p & 0xFFFFFFFF for pid in protected_pids for p in (pid, -pid)} | {0xFFFFFFFF})
        for nr in (_NR_KILL, _NR_TGKILL):
            insns += _deny_arg0_in(nr, values, errno.EPERM)
    insns.append(_stmt(_RET_K, _RET_ALLOW))
    return b"".join(insns)


def program_filter(protected_pids: list[int]) -> bytes:
    """F1: the program process's filter; ``protected_pids`` may not be signalled."""
    return _build(deny_fork=False, protected_pids=protected_pids, own_pid=None)


def test_filter(own_pid: int) -> bytes:
    """F2: the per-test child's filter (no fork, signals only to itself), stacked on F1.

    It holds only the rules F1 lacks, so it must be installed after :func:`program_filter`.
    """
    return _build(deny_fork=True, protected_pids=[], own_pid=own_pid)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_libc = ctypes.CDLL(None, use_errno=True)
_PID_SLOTS = (0x7FFFFFF1, 0x7FFFFFF3, 0x7FFFFFF5)  # placeholders patched with real pids at install


class _Template:
    """A BPF program in a ctypes buffer whose pid constants are patched in place before loading."""

    def __init__(self, program: bytes, slots: dict[int, int]) -> None:
        self.buf = ctypes.create_string_buffer(program, len(program))
        self.prog = _SockFprog(len(program) // 8, ctypes.cast(self.buf, ctypes.c_void_p))
        self.address = ctypes.addressof(self.prog)
        # (offset of a constant, slot index, negated) for every placeholder occurrence
        self.patches: list[tuple[int, int, bool]] = []
        for i, slot in slots.items():
            for value, negated in ((slot, False), ((-slot) & 0xFFFFFFFF, True)):
                needle = struct.pack("<I", value)
                at = program.find(needle)
                while at >= 0:
                    if at % 8 == 4:  # the k field of an instruction
                        self.patches.append((at, i, negated))
                    at = program.find(needle, at + 1)

    def patch(self, pids: tuple[int, ...]) -> None:
        for at, i, negated in self.patches:
            self.buf[at : at + 4] = struct.pack("<I", (-pids[i] if negated else pids[i]) & 0xFFFFFFFF)


class PreparedFilters:
    """F1 and F2 built once per worker, so that loading one in a fresh fork is two ``prctl`` calls.

    Building the BPF in Python and the first ctypes call in a forked process cost about 0.1 and
    0.8 ms; done here once (in the zygote), every program and test child inherits the result.
    """

    def __init__(self) -> None:
        self._prctl = _libc["prctl"]  # a private function object: its argtypes are set below
        self._prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
        self._prctl.restype = ctypes.c_int
        f1 = program_filter(list(_PID_SLOTS))
        self._f1 = _Template(f1, dict(enumerate(_PID_SLOTS)))
        self._f2 = _Template(test_filter(_PID_SLOTS[0]), {0: _PID_SLOTS[0]})
        self._f2.patches = [p for p in self._f2.patches if not p[2]]  # F2 compares the own pid only
        self._prctl(-1, 0, 0, 0, 0)  # resolve the symbol now (EINVAL)

    def _load(self, template: _Template) -> None:
        if self._prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if self._prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, template.address, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")

    def install_program(self, protected_pids: tuple[int, int, int]) -> None:
        """Load F1; the three pids (repeats allowed) may not be signalled."""
        self._f1.patch(protected_pids)
        self._load(self._f1)

    def install_test(self, own_pid: int) -> None:
        """Load F2 (after F1): no fork, signals only to ``own_pid``."""
        self._f2.patch((own_pid,))
        self._load(self._f2)


def install(program: bytes) -> None:
    """Load a BPF program into the calling process (and set no_new_privs); raises OSError."""
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def unavailable_reason() -> str:
    """Empty when seccomp filters can be used here, else why not (probed in a forked child)."""
    if os.uname().machine != "x86_64":
        return f"filters are written for x86_64, this is {os.uname().machine}"
    return denied_in_child(lambda: install(test_filter(os.getpid())), os.fork)
