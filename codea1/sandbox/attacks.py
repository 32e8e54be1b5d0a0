"""The exploit suite behind ``codea1 sandbox selftest`` and the sandbox tests.

Every attack is a candidate program (sometimes a hostile prediction) run through
:meth:`Sandbox.run_grids` in one batch together with benign neighbour jobs. An attack is
*contained* when its verdicts are the expected ones, every neighbour got exactly its correct
verdicts, the host-side probes (files, listener, environment) show no effect, and no process is
left behind in any worker.
"""

from __future__ import annotations

import ctypes
import os
import random
import select
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codea1.sandbox.worker.value_codec import END_FRAME, RESULT_VALUE, TEST_RECORD, encode, frame
from codea1.types import CheckJob, ExecGrid, GridJob, TestCase, Verdict

REF = "def f(x):\n    return x + 1\n"
SECRET_ENV = "CODEA1_SELFTEST_SECRET"
NOT_PASS = frozenset({"fail", "error", "timeout", "memory"})


@dataclass(frozen=True)
class Attack:
    """One hostile program: source template, tests, allowed verdicts and host-side checks."""

    name: str
    code: str
    verdicts: frozenset[str]
    code_status: frozenset[str] = frozenset({"pass"})
    reference: str = REF
    tests: tuple[tuple[str, str], ...] = (("f(1)", "2"),)
    oracle: frozenset[str] = frozenset({"valid"})
    host_check: str = ""
    """Name of a check in :class:`HostProbe` (files untouched, no connection, ...)."""
    harness: str = ""
    """A check of its own (harness mode only; else :data:`HARNESS`): its verdict must be in ``verdicts``."""
    check_cpu_s: float = 0.5
    question_names: frozenset[str] | None = None
    """The names the question provides (``GridJob.question_names``); None: not checked."""
    question_helpers: str = ""
    """The question's own helpers as trusted source (``GridJob.question_helpers``)."""


def _a(name: str, code: str, verdicts: set[str], **kw: Any) -> Attack:
    return Attack(
        name,
        code,
        frozenset(verdicts),
        **{k: frozenset(v) if isinstance(v, set) else v for k, v in kw.items()},
    )


def _forged_stream(value: Any) -> bytes:
    """What the trusted side would read for "loaded, test 0 returned ``value``, end" (both kinds
    of record: a grid test and a check's call answer), plus a harness verdict of "pass"."""
    answer = frame(RESULT_VALUE + encode(value))
    return (
        frame(encode(("load", "pass", "")))
        + frame(b"T" + TEST_RECORD.pack(0, 0, 0.0, False) + answer)
        + frame(b"C" + TEST_RECORD.pack(0, 0, 0.0, False))
        + END_FRAME
        + frame(encode(("check", "pass", "")))
        + answer
    )


# Claims the right answer for the suite's test f(1) (grid: 2; a check's old verdict: None), while
# the real f returns a wrong value: a forge that worked would turn "fail" into "pass".
_FORGED = repr(_forged_stream(2) + _forged_stream(None))
_WRONG_F = "def f(x):\n    return 12345.0\n"
_SPRAY = "def _spray():\n    for fd in range(3, 64):\n        try:\n            os.write(fd, FORGED)\n        except OSError:\n            pass\n"
FORGE_ATTACKS: tuple[Attack, ...] = tuple(
    Attack(
        name,
        f"import os\nFORGED = {_FORGED}\n{_SPRAY}{code}",
        NOT_PASS | {"invalid"},
        code_status=frozenset({"pass", "error"}),
    )  # fmt: skip
    for name, code in (
        ("forge_report_at_load", "os.write(3, FORGED)\n" + _WRONG_F),
        ("forge_every_fd_at_load", "_spray()\n" + _WRONG_F),
        (
            "forge_ctypes_write_at_load",
            "import ctypes\nctypes.CDLL(None).write(3, FORGED, len(FORGED))\n" + _WRONG_F,
        ),
        ("forge_every_fd_at_call", "def f(x):\n    _spray()\n    return 12345.0\n"),
        (
            "forge_dup2_report_into_call",
            "os.dup2(3, 40)\ndef f(x):\n    os.write(40, FORGED)\n    _spray()\n    return 12345.0\n",
        ),
        (
            "forge_from_thread",
            "import threading, time\ndef _loop():\n    for _ in range(300):\n        _spray()\n        time.sleep(0.002)\n"
            "threading.Thread(target=_loop, daemon=True).start()\n"
            "def f(x):\n    threading.Thread(target=_loop, daemon=True).start()\n    time.sleep(0.05)\n    return 12345.0\n",
        ),
        (
            "forge_atexit_hook",
            "import atexit, sys\natexit.register(_spray)\n"
            "def f(x):\n    atexit.register(_spray)\n    sys.exitfunc = _spray\n    return 12345.0\n",
        ),
    )
)
"""Every way candidate code can write bytes towards the trusted side (the report pipe at load
time, any fd, ctypes ``write(2)``, a dup2'd copy used at call time, a thread, an atexit hook)."""

_BLOCKED_REF = "def f(x):\n    return 'blocked'\n"
_UNIX_TRY = (
    "import socket\n"
    "def _reach(kind, addr):\n"
    "    try:\n"
    "        s = socket.socket(socket.AF_UNIX, kind)\n"
    "        s.settimeout(1)\n"
    "        if kind == socket.SOCK_DGRAM:\n"
    "            s.sendto(b'leak', addr)\n"
    "        else:\n"
    "            s.connect(addr)\n"
    "            s.sendall(b'leak')\n"
    "        return 'connected'\n"
    "    except OSError:\n"
    "        return 'blocked'\n"
)
_SOCKET_TARGETS = (  # (name, socket type, its number, address)
    ("unix_stream", "socket.SOCK_STREAM", 1, "{unix_stream!r}"),
    ("unix_dgram", "socket.SOCK_DGRAM", 2, "{unix_dgram!r}"),
    ("unix_seqpacket", "socket.SOCK_SEQPACKET", 5, "{unix_seqpacket!r}"),
    ("abstract_stream", "socket.SOCK_STREAM", 1, "{abstract_stream!r}"),
    ("abstract_dgram", "socket.SOCK_DGRAM", 2, "{abstract_dgram!r}"),
)


def _reach_expr(kind: int, addr: str) -> str:
    """A prediction that reaches ``addr`` when evaluated (on the oracle side), then equals 2."""
    sock = f"__import__('socket').socket(1, {kind})"
    return f"{sock}.sendto(b'leak', {addr}) and 2" if kind == 2 else f"{sock}.connect({addr}) or 2"


HOST_SOCKET_ATTACKS: tuple[Attack, ...] = tuple(
    attack
    for name, kind, number, addr in _SOCKET_TARGETS
    for attack in (
        _a(
            f"{name}_at_call",
            _UNIX_TRY + f"def f(x):\n    return _reach({kind}, {addr})\n",
            {"pass"},
            reference=_BLOCKED_REF,
            tests=(("f(1)", "'blocked'"),),
            host_check=f"no_connection:{name}",
        ),
        _a(
            f"{name}_at_load",
            _UNIX_TRY + f"_R = _reach({kind}, {addr})\ndef f(x):\n    return _R\n",
            {"pass"},
            reference=_BLOCKED_REF,
            tests=(("f(1)", "'blocked'"),),
            host_check=f"no_connection:{name}",
        ),
        _a(
            f"{name}_from_prediction",
            "def f(x):\n    return x + 1\n",
            {"pass"},
            tests=(("f(1)", _reach_expr(number, addr)),),
            oracle={"wrong_prediction"},
            host_check=f"no_connection:{name}",
        ),
    )
) + (
    _a(
        "unix_sendmsg_and_dgram_socketpair",
        "import socket\ndef f(x):\n    out = []\n    for make in (lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM),\n"
        "                 lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0]):\n        try:\n"
        "            make().sendmsg([b'leak'], [], 0, {unix_dgram!r})\n            out.append('sent')\n"
        "        except OSError:\n            out.append('blocked')\n    return out\n",
        {"pass"},
        reference="def f(x):\n    return ['blocked', 'blocked']\n",
        tests=(("f(1)", "['blocked', 'blocked']"),),
        host_check="no_connection:unix_dgram",
    ),
    _a(
        "other_socket_families",
        "import socket\ndef f(x):\n    out = []\n    for fam, kind in ((socket.AF_INET, socket.SOCK_DGRAM), (socket.AF_INET6, socket.SOCK_STREAM),\n"
        "                      (socket.AF_NETLINK, socket.SOCK_RAW), (socket.AF_PACKET, socket.SOCK_RAW),\n"
        "                      (getattr(socket, 'AF_VSOCK', 40), socket.SOCK_STREAM)):\n        try:\n"
        "            socket.socket(fam, kind)\n            out.append('created')\n        except OSError:\n"
        "            out.append('blocked')\n    return out\n",
        {"pass"},
        reference="def f(x):\n    return ['blocked'] * 5\n",
        tests=(("f(1)", "['blocked'] * 5"),),
    ),
    _a(
        "stream_socketpair_still_works",
        "import socket\ndef f(x):\n    a, b = socket.socketpair()\n    a.sendall(bytes([x]))\n    return b.recv(1)[0] + 1\n",
        {"pass"},
    ),
    _a(
        "stat_host_paths",
        "import os\ndef f(x):\n    return [p for p in {host_paths!r} if os.path.lexists(p)]\n",
        {"pass"},
        reference="def f(x):\n    return []\n",
        tests=(("f(1)", "[]"),),
    ),
    _a(
        "list_host_tmp",
        "import os\ndef f(x):\n    seen = []\n    for d in ('/tmp', '/var/tmp', '/run', '/'):\n        try:\n"
        "            seen += [os.path.join(d, n) for n in os.listdir(d)]\n        except OSError:\n            pass\n"
        "    return sorted(p for p in seen if {probe_name!r} in p or p.endswith(('.sock', 'ray')))\n",
        {"pass"},
        reference="def f(x):\n    return []\n",
        tests=(("f(1)", "[]"),),
    ),
    _a(
        "sysv_ipc_of_host",
        "import ctypes\ndef f(x):\n    libc = ctypes.CDLL(None)\n    got = [libc.shmget({shm_key}, 0, 0), libc.msgget({shm_key}, 0), libc.semget({shm_key}, 0, 0)]\n"
        "    return ['found' if r >= 0 else 'blocked' for r in got]\n",
        {"pass"},
        reference="def f(x):\n    return ['blocked'] * 3\n",
        tests=(("f(1)", "['blocked'] * 3"),),
    ),
    _a(
        "ptrace_and_read_parent_memory",
        "import ctypes, os\ndef f(x):\n    libc = ctypes.CDLL(None, use_errno=True)\n    out = []\n"
        "    for pid in (os.getppid(), 1):\n        out.append(libc.ptrace(16, pid, 0, 0))  # PTRACE_ATTACH\n"
        "        try:\n            open('/proc/%d/mem' % pid, 'rb').read(1)\n            out.append('read')\n"
        "        except OSError:\n            out.append('denied')\n    return out\n",
        {"pass"},
        reference="def f(x):\n    return [-1, 'denied', -1, 'denied']\n",
        tests=(("f(1)", "[-1, 'denied', -1, 'denied']"),),
    ),
    _a(
        "inherited_descriptors",
        "import os, stat\ndef f(x):\n    found = []\n    for fd in range(0, 1024):\n        try:\n            mode = os.fstat(fd).st_mode\n"
        "        except OSError:\n            continue\n        if stat.S_ISSOCK(mode) or stat.S_ISREG(mode) or stat.S_ISDIR(mode):\n"
        "            found.append(fd)\n    return found\n",
        {"pass"},
        reference="def f(x):\n    return []\n",
        tests=(("f(1)", "[]"),),
    ),
)
"""Every way to reach a host socket (pathname and abstract; stream, datagram, seqpacket; connect,
sendto, sendmsg; from a candidate at call and load time and from a prediction on the oracle side),
other socket families, host paths (``os.stat``, ``listdir``), System V IPC, ptrace and process
memory, inherited descriptors; and a nameless stream socketpair, which must keep working."""

_NAMESPACE_FLAGS = (("user", 0x10000000), ("mount", 0x00020000), ("pid", 0x20000000), ("net", 0x40000000),
                    ("ipc", 0x08000000), ("uts", 0x04000000), ("cgroup", 0x02000000))  # fmt: skip
_NAMESPACE_PROBE = (
    "import ctypes, errno, os, threading\n"
    "_libc = ctypes.CDLL(None, use_errno=True)\n"
    "_libc.syscall.restype = ctypes.c_long\n"
    "def _ret(r):\n"
    "    if r == 0:\n"
    "        os._exit(0)\n"
    "    if r > 0:\n"
    "        os.waitpid(r, 0)\n"
    "        return 'created'\n"
    "    return errno.errorcode.get(ctypes.get_errno(), '?')\n"
    "def _clone(flags):\n"
    "    ctypes.set_errno(0)\n"
    "    return _ret(_libc.syscall(ctypes.c_long(56), ctypes.c_ulong(flags), *[ctypes.c_ulong(0)] * 4))\n"
    "def _clone3(flags):\n"
    "    args = (ctypes.c_uint64 * 8)(flags, 0, 0, 0, 17, 0, 0, 0)\n"
    "    ctypes.set_errno(0)\n"
    "    return _ret(_libc.syscall(ctypes.c_long(435), args, ctypes.c_size_t(64)))\n"
    "def _fork():\n"
    "    try:\n"
    "        return _ret(os.fork())\n"
    "    except OSError as e:\n"
    "        return errno.errorcode.get(e.errno, '?')\n"
    "def _thread():\n"
    "    box = []\n"
    "    t = threading.Thread(target=box.append, args=(1,))\n"
    "    t.start()\n"
    "    t.join()\n"
    "    return 'ran' if box else 'not run'\n"
    "def _probe():\n"
    "    # each namespace: a forked child, a thread-form clone (the kernel would say EINVAL), clone3\n"
    f"    out = [(n, _clone(v | 17), _clone(v | 0x10000), _clone3(v)) for n, v in {_NAMESPACE_FLAGS!r}]\n"
    "    return out + [('fork', _fork()), ('clone', _clone(17)), ('thread', _thread())]\n"
)
_NAMESPACE_REFUSED = [(name, "EPERM", "EPERM", "ENOSYS") for name, _ in _NAMESPACE_FLAGS]
_NAMESPACE_AT_LOAD = repr(_NAMESPACE_REFUSED + [("fork", "created"), ("clone", "created"), ("thread", "ran")])
_NAMESPACE_AT_CALL = repr(_NAMESPACE_REFUSED + [("fork", "EPERM"), ("clone", "EPERM"), ("thread", "ran")])
NAMESPACE_ATTACKS: tuple[Attack, ...] = (
    _a(
        "namespaces_at_load",
        _NAMESPACE_PROBE + "_R = _probe()\ndef f(x):\n    return _R\n",
        {"pass"},
        reference=f"def f(x):\n    return {_NAMESPACE_AT_LOAD}\n",
        tests=(("f(1)", _NAMESPACE_AT_LOAD),),
    ),
    _a(
        "namespaces_at_call",
        _NAMESPACE_PROBE + "def f(x):\n    return _probe()\n",
        {"pass"},
        reference=f"def f(x):\n    return {_NAMESPACE_AT_CALL}\n",
        tests=(("f(1)", _NAMESPACE_AT_CALL),),
    ),
)
"""Every namespace flag through ``clone(2)`` (as a child, and with ``CLONE_THREAD``) and
``clone3(2)``, while the program loads and inside a test: all refused (EPERM; clone3 ENOSYS, so
libc falls back to ``clone``), while fork (at load time), plain ``clone`` and threads still work."""

_LOOP_SUM = "def f(x):\n    s = 0\n    for v in x:\n        s += v\n    return s\n"
_BUILTIN_SUM = "def f(x):\n    return sum(x)\n"
_PATCH_SUM = "setattr(__import__('builtins'), 'sum', lambda *a, **k: -1)"
TEST_SIDE_ATTACKS: tuple[Attack, ...] = tuple(
    _a(name, _BUILTIN_SUM, {"invalid"}, reference=_LOOP_SUM, tests=((call, pred),), oracle={"invalid"})
    for name, call, pred in (
        ("test_reads_code", "f([len(f.__code__.co_code)])", "40"),
        ("test_reads_defaults", "f(list(f.__defaults__ or [1]))", "1"),
        ("test_inspects_source", "f([len(__import__('inspect').getsource(f))])", "90"),
        ("test_reads_sys_modules", "f([len(__import__('sys').modules)])", "100"),
        ("test_rebinds_globals", "f((globals().__setitem__('sum', lambda *a: -1), [1, 2])[1])", "3"),
        ("test_patches_builtins", f"f(({_PATCH_SUM}, [1, 2])[1])", "3"),
        (
            "test_patches_builtins_in_comprehension",
            "f([0 for __import__('builtins').sum in [len]][1:] + [1, 2])",
            "3",
        ),
        ("test_sets_recursion_limit", "f((__import__('sys').setrecursionlimit(40), [1, 2])[1])", "3"),
        ("test_builtins_by_name", "f((__builtins__.__dict__.__setitem__('sum', len), [1, 2])[1])", "3"),
    )
) + (
    _a(
        "test_honest_helper_values",
        _BUILTIN_SUM,
        {"pass"},
        reference=_LOOP_SUM,
        tests=(("f([i * i for i in range(4)] + list(map(abs, (-1, 2))))", "17"), ("f(sorted([3, 1]))", "4")),
    ),
)
"""Tests that attack the candidate instead of testing it: inputs computed from the function object
(its code, defaults, source) or from the interpreter, and builtins or globals replaced before the
call. Each passes on the loop-based reference and fails the correct ``sum``-based candidate unless
refused: their oracle is ``invalid``. The last one keeps the expressive range (comprehensions,
pure builtins) and must pass."""

# --- issue 45, items 1, 5, 6, 7: frames, values that lie inside the call, shadowed names, int tolerance ---
_NODE = "class Node:\n    def __init__(self, v):\n        self.val = v\n"
SCOPE_ATTACKS: tuple[Attack, ...] = tuple(
    _a(name, _BUILTIN_SUM, {"invalid"}, reference=_LOOP_SUM, tests=((call, "1"),), oracle={"invalid"})
    for name, call in (
        ("test_frame_globals", "f([len((0 for _ in []).gi_frame.f_globals)])"),
        ("test_frame_builtins", "f([len((0 for _ in []).gi_frame.f_builtins)])"),
        ("test_generator_code", "f([len((0 for _ in []).gi_code.co_code)])"),
    )
) + (
    _a("test_honest_generator_input", _BUILTIN_SUM, {"pass"}, reference=_LOOP_SUM,
       tests=(("f(v * 2 for v in range(3))", "6"), ("f(list(map(abs, (-1, 2))))", "3"))),
    _a(
        "eq_always_true_inside_the_test",
        "class A:\n    def __eq__(self, o):\n        return True\n    def __ne__(self, o):\n        return False\n"
        "    __hash__ = object.__hash__\ndef f(x):\n    return A()\n",
        {"fail"},
        tests=(("bool(f(1) == 2)", "True"), ("tuple([f(1) == 2, f(2) == 3])", "(True, True)"),
               ("[f(1)] == [2]", "True"), ("2 == f(1)", "True"), ("f(1) != 2", "False")),
    ),
    _a(
        "int_subclass_eq_inside_the_test",
        "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
        "def f(x):\n    return I(0)\n",
        {"fail"},
        tests=(("bool(f(1) == 2)", "True"), ("f(1) in [2]", "True")),
    ),
    _a(
        "honest_objects_inside_the_test",
        _NODE + "def f(x):\n    n = Node(0)\n    n.val += x + 1\n    return n\n",
        {"pass"},
        reference=_NODE + "def f(x):\n    return Node(x + 1)\n",
        tests=(("f(1).val", "2"), ("[f(1).val == 2, f(2).val != 3, f(2) == f(3)]", "[True, False, False]"),
               ("f(1)", "Node(2)"), ("sorted([f(3).val, f(1).val])", "[2, 4]")),
    ),
    _a(
        "shadowed_builtin_sorted",
        "def sorted(v, **k):\n    return [2, 4, 6]\ndef f(x):\n    return [0]\n",
        {"fail"},
        reference="def f(x):\n    return [v * 2 for v in x]\n",
        tests=(("sorted(f([3, 1, 2]))", "[2, 4, 6]"),),
    ),
    _a(
        "builtins_sorted_patched_at_load",
        "import builtins\nbuiltins.sorted = lambda v, **k: [2, 4, 6]\ndef f(x):\n    return [0]\n",
        {"fail"},
        reference="def f(x):\n    return [v * 2 for v in x]\n",
        tests=(("sorted(f([3, 1, 2]))", "[2, 4, 6]"),),
    ),
    _a(
        "float_for_an_expected_int",
        "def f(n):\n    return float(n * 3 + 5)\n",
        {"fail"},
        reference="def f(n):\n    return n * 3\n",
        tests=(("f(10**7)", "30000000"),),
    ),
)  # fmt: skip
"""Tests that reach frames or code objects (their oracle is ``invalid``) beside an honest generator
input; values whose methods would lie to a comparison the test makes itself, a name that shadows a
builtin the test calls, and a float where an int is expected (each wrong code must fail), beside
honest object results that must pass."""
# --- end of issue 45, items 1, 5, 6, 7 ---

# --- issue 45, item 6: a helper the question provides, redefined by the candidate ---
_IS_SORTED = "def is_sorted(xs):\n    return all(a <= b for a, b in zip(xs, xs[1:]))\n"
_SORTED_TESTS = (
    ("is_sorted(f([3, 1, 2]))", "True"),
    ("[is_sorted(f(v)) for v in ([2, 1], [1, 3, 2])]", "[True, True]"),
)
QUESTION_HELPER_ATTACKS: tuple[Attack, ...] = tuple(
    _a(name, code, verdicts, reference=_IS_SORTED + "def f(xs):\n    return sorted(xs)\n", tests=_SORTED_TESTS,
       question_names=frozenset({"is_sorted", "f"}), question_helpers=_IS_SORTED)
    for name, code, verdicts in (
        ("question_helper_redefined", "def is_sorted(xs):\n    return True\ndef f(xs):\n    return list(xs)\n", {"fail"}),
        ("question_helper_honest_own_copy",
         "def is_sorted(xs):\n    return list(xs) == sorted(xs)\ndef f(xs):\n    out = list(xs)\n    out.sort()\n    return out\n",
         {"pass"}),
        ("question_helper_honest_not_copied", "def f(xs):\n    return sorted(xs, key=lambda v: v)\n", {"pass"}),
    )
)  # fmt: skip
"""The question provides ``is_sorted`` and the tests call it on ``f``'s result: a wrong candidate that
redefines ``is_sorted`` to say True must fail (a test calls the question's definition, from the
trusted copy), while correct candidates pass, with their own ``is_sorted`` or none at all."""
# --- end of issue 45, item 6 ---

# --- issue 45, items 2 and 4: outcomes that are not behaviour, the mutation term and introspection ---
_ECHO = "def f(s):\n    return s\n"
_HELPER_REF = "def helper(x):\n    return x * 2\ndef f(x):\n    return helper(x) + 1\n"
_FRAME = "next((g := (g.gi_frame.f_back for _ in [1])))"
_BYTECODE = f"{_FRAME}.f_builtins['getattr']({_FRAME}.f_back.f_back.f_back.f_locals['scope'].ns['f'], '__code__').co_code"
BEHAVIOUR_ATTACKS: tuple[Attack, ...] = (
    _a("test_identity_of_results", "def f(n):\n    return [n]\n", {"invalid"},
       reference="import functools\n@functools.lru_cache\ndef f(n):\n    return [n]\n",
       tests=(("bool(f(300) is f(300))", "True"),), oracle={"invalid"}),
    _a("test_address_of_an_object", _ECHO, {"invalid"}, reference=_ECHO,
       tests=(("f(repr(object()))", "''"), ("f(str(lambda: 0))", "''")), oracle={"invalid"}),
    _a("test_default_repr_of_a_result", _NODE + "def f(x):\n    return Node(x)\n", {"invalid"},
       reference=_NODE + "def f(x):\n    return Node(x)\n", tests=(("repr(f(1))", "''"),), oracle={"invalid"}),
    _a("test_name_only_the_reference_defines", "def f(x):\n    return 2 * x + 1\n", {"invalid"},
       reference=_HELPER_REF, tests=(("f(helper(1))", "5"),), oracle={"invalid"},
       question_names=frozenset({"f"})),
    _a("test_recursed_before_the_call", "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\n", {"pass"},
       reference="def f(n):\n    return n\n",
       tests=(("(lambda g: g(g, 900))(lambda g, k: g(g, k - 1) if k else f(95))", "95"),)),
    _a("test_honest_strings_and_question_helpers", _HELPER_REF, {"pass"}, reference=_HELPER_REF,
       tests=(("f(helper(1))", "5"), ("f(len(repr([1, 2])))", "13"), ("f(int(str(3) * 2))", "67")),
       question_names=frozenset({"f", "helper"})),
    _a("mutant_killed_by_reading_bytecode", "def f(x):\n    return x + 2\n", {"invalid"},
       tests=((f"f(len({_BYTECODE}) + sum({_BYTECODE}))", f"len({_BYTECODE}) + sum({_BYTECODE}) + 1"),),
       oracle={"invalid"}),
    _a("mutant_killed_by_an_honest_test", "def f(x):\n    return x + 2\n", {"fail"},
       tests=(("f(1)", "2"), ("f(-3)", "-2"))),
)  # fmt: skip
"""Outcomes that are not what the function does: whether two results are one object, the address
of an object (made by the test, or in a result's default repr), a name only the reference defines
(oracle ``invalid``); a test that recursed 900 frames before calling a correct recursive candidate
(it now passes: the entry point gets back the depth the test took); honest strings and a helper
the question provides (pass). And the mutation term's question: a test that reads the bytecode
"kills" a mutant of the reference (``x + 2``); it is invalid, while an honest test kills it."""
# --- end of issue 45, items 2 and 4 ---

_LOOP = "    while True:\n        pass\n"
ATTACKS: tuple[Attack, ...] = (
    (
        _a("infinite_loop", "def f(x):\n" + _LOOP, {"timeout"}),
        _a("c_level_cpu_hog", "def f(x):\n    return sum(range(10**13))\n", {"timeout"}),
        _a(
            "catastrophic_regex",
            "import re\ndef f(x):\n    return bool(re.match(r'(a+)+$', 'a' * 40 + 'b'))\n",
            {"timeout"},
        ),
        _a("alloc_10gb", "def f(x):\n    b = bytearray(10 * 1024**3)\n    return x + 1\n", {"memory"}),
        _a("fork_bomb_in_test", "import os\ndef f(x):\n    while True:\n        os.fork()\n", {"error"}),
        _a(
            "fork_bomb_at_load",
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\ndef f(x):\n    return x + 1\n",
            {"invalid"},
            code_status={"timeout", "memory", "error"},
        ),  # fmt: skip
        _a(
            "thread_bomb",
            "import threading, time\ndef f(x):\n    while True:\n        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n",
            {"error", "memory", "timeout"},
        ),  # fmt: skip
        _a("sys_exit_in_test", "import sys\ndef f(x):\n    sys.exit(0)\n", {"error"}),
        _a("os_exit_in_test", "import os\ndef f(x):\n    os._exit(0)\n", {"error"}),
        _a(
            "sys_exit_at_load",
            "import sys\nsys.exit(0)\ndef f(x):\n    return x + 1\n",
            {"invalid"},
            code_status={"error"},
        ),
        _a(
            "systemexit_from_del",
            "class D:\n    def __del__(self):\n        raise SystemExit(0)\ndef f(x):\n    return D()\n",
            {"fail"},
        ),
        _a(
            "signal_handler_override",
            "import signal\ndef f(x):\n    for s in (signal.SIGPROF, signal.SIGXCPU, signal.SIGALRM, signal.SIGTERM):\n"
            "        signal.signal(s, signal.SIG_IGN)\n" + _LOOP,
            {"timeout"},
        ),  # fmt: skip
        _a(
            "fake_verdict_markers",
            "import os, sys\ndef f(x):\n    print('PASS')\n    print('{\"status\": \"pass\"}')\n"
            "    sys.stderr.write('ALL TESTS PASSED\\n')\n    os.write(1, b'pass\\n')\n    return 0\n",
            {"fail"},
        ),  # fmt: skip
        _a(
            "eq_always_true",
            "class A:\n    def __eq__(self, o):\n        return True\n    def __ne__(self, o):\n        return False\n"
            "    __hash__ = object.__hash__\ndef f(x):\n    return A()\n",
            {"fail"},
        ),  # fmt: skip
        _a(
            "patch_builtins",
            "import builtins\ndef f(x):\n    r = abs(x) + 1\n    builtins.abs = lambda v: -999\n    return r\n",
            {"pass"},
            tests=(("f(1)", "2"), ("f(2)", "3"), ("f(3)", "4")),
        ),  # fmt: skip
        _a(
            "global_state_contamination",
            "_seen = []\ndef f(x):\n    _seen.append(x)\n    return len(_seen) + x\n",
            {"pass"},
            tests=(("f(1)", "2"), ("f(1)", "2"), ("f(1)", "2")),
        ),  # fmt: skip
        _a(
            "read_env_secret",
            "import os\ndef f(x):\n    return os.environ.get('" + SECRET_ENV + "', 'absent')\n",
            {"pass"},
            reference="def f(x):\n    return 'absent'\n",
            tests=(("f(1)", "'absent'"),),
        ),  # fmt: skip
        _a(
            "read_outside_file",
            "def f(x):\n    try:\n        return open({secret!r}).read()\n    except OSError:\n        return 'denied'\n",
            {"pass"},
            reference="def f(x):\n    return 'denied'\n",
            tests=(("f(1)", "'denied'"),),
        ),  # fmt: skip
        _a(
            "read_host_proc",
            "def f(x):\n    try:\n        return open('/proc/{host_pid}/environ').read()[:50]\n    except OSError:\n        return 'denied'\n",
            {"pass"},
            reference="def f(x):\n    return 'denied'\n",
            tests=(("f(1)", "'denied'"),),
        ),  # fmt: skip
        _a(
            "write_outside_file",
            "def f(x):\n    try:\n        open({outside!r} + '/written.txt', 'w').write('x')\n        return 'written'\n"
            "    except OSError:\n        return 'denied'\n",
            {"pass"},
            reference="def f(x):\n    return 'denied'\n",
            tests=(("f(1)", "'denied'"),),
            host_check="no_new_files",
        ),  # fmt: skip
        _a(
            "delete_outside_file",
            "import os, shutil\ndef f(x):\n    for fn in (lambda: os.remove({sentinel!r}), lambda: shutil.rmtree({outside!r})):\n"
            "        try:\n            fn()\n        except OSError:\n            pass\n    return x + 1\n",
            {"pass"},
            host_check="sentinel_intact",
        ),  # fmt: skip
        _a(
            "write_scratch_then_leave",
            "import os\nopen('left.txt', 'w').write('x' * 1000)\nos.makedirs('d/e', exist_ok=True)\n"
            "def f(x):\n    return len(os.listdir('.')) + x - 1\n",
            {"pass"},
        ),  # fmt: skip
        _a(
            "shell_exec",
            "import os, subprocess\ndef f(x):\n    os.system('touch ' + {outside!r} + '/shell.txt')\n    try:\n"
            "        subprocess.run(['touch', {outside!r} + '/shell2.txt'])\n    except OSError:\n        pass\n    return x + 1\n",
            {"pass"},
            host_check="no_new_files",
        ),  # fmt: skip
        _a(
            "socket_to_host_listener",
            "import socket\ndef f(x):\n    try:\n        s = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
            "        s.sendall(b'leak')\n        return 'connected'\n    except OSError:\n        return 'blocked'\n",
            {"pass"},
            reference="def f(x):\n    return 'blocked'\n",
            tests=(("f(1)", "'blocked'"),),
            host_check="no_connection",
        ),  # fmt: skip
        _a(
            "kill_parent_in_test",
            "import os, signal\ndef f(x):\n    for pid in (os.getppid(), {host_pid}, 1, -1, 0):\n        try:\n"
            "            os.kill(pid, signal.SIGKILL)\n        except OSError:\n            pass\n    return x + 1\n",
            {"pass"},
        ),  # fmt: skip
        _a(
            "kill_parent_at_load",
            "import os, signal\nfor pid in (os.getppid(), {host_pid}, 1, -1):\n    try:\n"
            "        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\ndef f(x):\n    return x + 1\n",
            {"pass"},
        ),  # fmt: skip
        _a(
            "daemon_left_behind",
            "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        while True:\n"
            "            time.sleep(0.1)\n    os._exit(0)\ndef f(x):\n    return x + 1\n",
            {"pass"},
        ),  # fmt: skip
        _a(
            "close_result_pipe_in_test",
            "import os\ndef f(x):\n    os.closerange(0, 1024)\n    return x + 1\n",
            {"error"},
        ),
        _a(
            "close_pipes_at_load",
            "import os\nos.closerange(0, 1024)\ndef f(x):\n    return x + 1\n",
            {"invalid"},
            code_status={"error"},
        ),  # fmt: skip
        _a(
            "huge_stdout",
            "import os\ndef f(x):\n    print('x' * 10**8)\n    os.write(1, b'y' * 10**7)\n    return x + 1\n",
            {"pass"},
        ),
        _a(
            "deep_recursion",
            "import sys\nsys.setrecursionlimit(10**7)\ndef f(x):\n    return f(x + 1) + 1\n",
            {"error", "memory", "timeout"},
        ),
        _a("huge_int", "def f(x):\n    return 10 ** 300000\n", {"fail"}),
        _a(
            "truthy_object",
            "class A:\n    def __bool__(self):\n        return True\ndef f(x):\n    return A()\n",
            {"fail"},
            reference="def f(x):\n    return x > 0\n",
            tests=(("f(1)", "True"),),
        ),
        _a(
            "deeply_nested_list",
            "def f(x):\n    v = []\n    for _ in range(100000):\n        v = [v]\n    return v\n",
            {"fail"},
        ),
        _a("nul_bytes_in_source", "def f(x):\n    return x + 1\x00\n", {"invalid"}, code_status={"error"}),
        _a(
            "non_utf8_source",
            "def f(x):\n    return x + 1  # \udcff\udc80\n",
            {"invalid"},
            code_status={"error"},
        ),
        _a("source_10mb", "# " + "a" * 10_000_000 + "\ndef f(x):\n    return x + 1\n", {"pass"}),
        _a(
            "hostile_prediction",
            "def f(x):\n    return x + 1\n",
            {"pass"},
            tests=(
                ("f(1)", "__import__('os').system('touch ' + {outside!r} + '/pred.txt') or 2"),
                ("f(1)", "[i for i in iter(int, 1)]"),
            ),
            oracle={"wrong_prediction"},
            host_check="no_new_files",
        ),  # fmt: skip
    )
    + FORGE_ATTACKS
    + HOST_SOCKET_ATTACKS
    + NAMESPACE_ATTACKS
    + TEST_SIDE_ATTACKS
    + SCOPE_ATTACKS
    + QUESTION_HELPER_ATTACKS
    + BEHAVIOUR_ATTACKS
)

HARNESS = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(1)\n"
"""The check every harness-mode attack runs against (the grid suite's reference is f(x) = x + 1)."""
_HARNESS_ALSO = ("eq_always_true", "truthy_object", "infinite_loop", "os_exit_in_test", "sys_exit_in_test",
                 "systemexit_from_del", "patch_builtins", "signal_handler_override", "close_pipes_at_load")  # fmt: skip
_DIGEST_K = 700_000
DIGEST_ATTACKS: tuple[Attack, ...] = (
    _a(
        "digest_type_confusion",
        "import marshal, struct\ndef f(x):\n    body = (marshal.dumps(1, 0) + marshal.dumps(None, 0) * 3) * x\n"
        "    return marshal.loads(b'l' + struct.pack('<I', 4 * x) + body)\n",
        {"fail"},
        harness=f"def check(candidate):\n    assert candidate({_DIGEST_K}) == [1, None, None, None] * {_DIGEST_K}\n",
        check_cpu_s=10.0,
    ),
)
"""A value over 4 MiB is compared by digest: an int whose ``marshal`` spells a list's old digest
stream (``l``, its count, its elements) once passed ``assert out == [...]``."""
HARNESS_ATTACKS: tuple[Attack, ...] = (
    FORGE_ATTACKS + tuple(a for a in ATTACKS if a.name in _HARNESS_ALSO) + DIGEST_ATTACKS
)
"""Attacks also run as checks (``check(candidate)`` in the trusted harness process); none may pass,
except ``patch_builtins``, which is correct code."""

NEIGHBOURS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "def g(a, b):\n    return a + b\n",
        "g",
        ("def g(a, b):\n    return a + b\n", "def g(a, b):\n    return a - b\n"),
    ),
    (
        "def h(s):\n    return s[::-1]\n",
        "h",
        ("def h(s):\n    return ''.join(reversed(s))\n", "def h(s):\n    return s\n"),
    ),
)
NEIGHBOUR_TESTS = {"g": (("g(1, 2)", "3"), ("g(2, 0)", "2")), "h": (("h('ab')", "'ba'"), ("h('aa')", "'aa'"))}
NEIGHBOUR_EXPECTED = {"g": (("pass", "pass"), ("fail", "pass")), "h": (("pass", "pass"), ("fail", "pass"))}


_IPC_CREAT, _IPC_RMID = 0o1000, 0


@dataclass
class HostProbe:
    """Host-side bait: a secret file, a sentinel file, an outside directory, a TCP listener, UNIX
    sockets on host paths and abstract names (stream, datagram, seqpacket), a System V shared
    memory segment and a ``/dev/shm`` file, and host paths that must not be visible inside."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="codea1-attack-")))
    hits: dict[str, int] = field(default_factory=dict)
    """Connections accepted or datagrams received, per listener ("tcp" or an address name)."""

    def __post_init__(self) -> None:
        self.outside = self.root / "outside"
        self.outside.mkdir()
        self.secret = self.root / "secret.txt"
        self.secret.write_text("TOP-SECRET")
        self.sentinel = self.outside / "sentinel.txt"
        self.sentinel.write_text("keep me")
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        tag = f"{self.root.name}-{os.getpid()}"
        self.addresses = {
            "unix_stream": str(self.root / "stream.sock"),
            "unix_dgram": str(self.root / "dgram.sock"),
            "unix_seqpacket": str(self.root / "seqpacket.sock"),
            "abstract_stream": f"\0{tag}-stream",
            "abstract_dgram": f"\0{tag}-dgram",
        }
        kinds = {"stream": socket.SOCK_STREAM, "dgram": socket.SOCK_DGRAM, "seqpacket": socket.SOCK_SEQPACKET}
        self.sockets = {"tcp": self.listener}
        for name, address in self.addresses.items():
            sock = socket.socket(socket.AF_UNIX, kinds[name.split("_")[1]])
            sock.bind(address)
            if sock.type != socket.SOCK_DGRAM:
                sock.listen(8)
            self.sockets[name] = sock
        self.shm_key, self._shm_id = self._make_sysv_segment()
        self.shm_file = Path("/dev/shm") / tag
        try:
            self.shm_file.write_text("TOP-SECRET")
        except OSError:
            self.shm_file = self.root / "no-dev-shm"
        self.host_paths = self._host_paths()
        self._stop = self._settled = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @staticmethod
    def _make_sysv_segment() -> tuple[int, int]:
        libc = ctypes.CDLL(None, use_errno=True)
        for _ in range(16):
            key = random.randrange(1 << 20, 1 << 30)
            shm_id = libc.shmget(key, 4096, _IPC_CREAT | 0o600)
            if shm_id >= 0:
                return key, shm_id
        return random.randrange(1 << 20, 1 << 30), -1

    def _host_paths(self) -> list[str]:
        """Host paths that exist here and that no program may see (ancestors of the interpreter's
        own trees, which the sandbox must show, are left out)."""
        own = [sys.prefix, sys.base_prefix, tempfile.gettempdir()]
        candidates = [str(self.root), self.addresses["unix_stream"], str(self.shm_file), "/run", "/var/run",
                      "/home", "/sys/kernel", "/proc/1", "/dev/shm", "/etc/passwd", "/etc/hostname",
                      "/var/log", "/root/.ssh", "/tmp/ray"]  # fmt: skip
        return [p for p in candidates if os.path.lexists(p) and not any(o.startswith(p + "/") for o in own)]

    def _accept(self) -> None:
        while not self._stop:
            try:
                readable, _, _ = select.select(list(self.sockets.values()), [], [], 0.2)
            except (OSError, ValueError):
                return
            for name, sock in self.sockets.items():
                if sock not in readable:
                    continue
                try:
                    if sock.type == socket.SOCK_DGRAM:
                        sock.recv(64)
                    else:
                        sock.accept()[0].close()
                except OSError:
                    continue
                self.hits[name] = self.hits.get(name, 0) + 1

    def fill(self, template: str) -> str:
        """Substitute the bait locations into an attack's source."""
        values: dict[str, Any] = {"secret": str(self.secret), "outside": str(self.outside),
                                  "sentinel": str(self.sentinel), "port": self.port, "host_pid": os.getpid(),
                                  "shm_key": self.shm_key, "host_paths": self.host_paths,
                                  "probe_name": self.root.name, **self.addresses}  # fmt: skip
        out = template
        for k, v in values.items():
            out = out.replace("{" + k + "!r}", repr(v)).replace("{" + k + "}", str(v))
        return out

    def check(self, name: str) -> str:
        """Empty when the named host-side check holds, else what went wrong."""
        if name == "no_new_files":
            extra = sorted(p.name for p in self.outside.iterdir() if p.name != "sentinel.txt")
            return f"files appeared outside the sandbox: {extra}" if extra else ""
        if name == "sentinel_intact":
            return "" if self.sentinel.exists() else "a file outside the sandbox was deleted"
        if name.startswith("no_connection"):  # "no_connection" (TCP) or "no_connection:<address name>"
            if not self._settled:  # let the accept thread see a late connection, once
                time.sleep(0.3)
                self._settled = True
            listener = name.partition(":")[2] or "tcp"
            n = self.hits.get(listener, 0)
            return f"{n} connection(s) reached the host's {listener} listener" if n else ""
        return ""

    def close(self) -> None:
        """Stop the listeners and remove the bait."""
        self._stop = True
        self._thread.join(timeout=2)
        for sock in self.sockets.values():
            sock.close()
        if self._shm_id >= 0:
            ctypes.CDLL(None).shmctl(self._shm_id, _IPC_RMID, None)
        if self.shm_file.parent == Path("/dev/shm"):
            self.shm_file.unlink(missing_ok=True)
        import shutil

        shutil.rmtree(self.root, ignore_errors=True)


@dataclass(frozen=True)
class AttackResult:
    """One row of the selftest table."""

    name: str
    contained: bool
    verdicts: str
    detail: str = ""


def stray_processes(worker_pids: list[int]) -> list[int]:
    """Descendants of the workers other than each worker's zygote (anything a job left behind)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    stray: list[int] = []
    for outer in worker_pids:
        for zygote in children.get(outer, []):
            stack = list(children.get(zygote, []))
            while stack:
                pid = stack.pop()
                stray.append(pid)
                stack.extend(children.get(pid, []))
    return stray


def wait_for_no_strays(worker_pids: list[int], timeout: float = 5.0) -> list[int]:
    """Poll until no stray process is left (the sweep runs right after each job); returns leftovers."""
    deadline = time.monotonic() + timeout
    while True:
        stray = stray_processes(worker_pids)
        if not stray or time.monotonic() > deadline:
            return stray
        time.sleep(0.05)


def _summary(grid: ExecGrid) -> str:
    code = grid.code_status[0].status
    cells = ",".join(v.status + (f"({v.reason})" if v.reason else "") for v in grid.verdicts[0])
    return f"code={code} oracle={','.join(o.status for o in grid.oracle)} tests={cells}"


def _judge(attack: Attack, grid: ExecGrid) -> str:
    problems = []
    if grid.code_status[0].status not in attack.code_status:
        problems.append(f"code status {grid.code_status[0].status}")
    if any(o.status not in attack.oracle for o in grid.oracle):
        problems.append("oracle " + ",".join(o.status for o in grid.oracle))
    if any(v.status not in attack.verdicts for v in grid.verdicts[0]):
        problems.append("verdicts " + ",".join(v.status for v in grid.verdicts[0]))
    return "; ".join(problems)


def attack_jobs(probe: HostProbe, attacks: tuple[Attack, ...] = ATTACKS) -> list[GridJob]:
    """The grid jobs of the suite: each attack followed by a benign neighbour."""
    jobs: list[GridJob] = []
    for i, attack in enumerate(attacks):
        tests = tuple(TestCase(probe.fill(c), probe.fill(p)) for c, p in attack.tests)
        jobs.append(
            GridJob(
                f"attack/{attack.name}",
                attack.reference,
                "f",
                (probe.fill(attack.code),),
                tests,
                attack.question_names,
                attack.question_helpers,
            )  # fmt: skip
        )
        ref, entry, codes = NEIGHBOURS[i % len(NEIGHBOURS)]
        ntests = tuple(TestCase(c, p) for c, p in NEIGHBOUR_TESTS[entry])
        jobs.append(GridJob(f"neighbour/{i}", ref, entry, codes, ntests))
    return jobs


def harness_jobs(probe: HostProbe, attacks: tuple[Attack, ...] = HARNESS_ATTACKS) -> list[CheckJob]:
    """The check jobs of the suite: each harness attack, then one correct candidate."""
    jobs = [
        CheckJob(f"harness:{a.name}", probe.fill(a.code), "f", a.harness or HARNESS, a.check_cpu_s)
        for a in attacks
    ]
    return jobs + [CheckJob("harness:correct_candidate", REF, "f", HARNESS, 0.5)]


def _harness_results(
    jobs: list[CheckJob], verdicts: list[Verdict], attacks: tuple[Attack, ...] = ()
) -> list[AttackResult]:
    own = {f"harness:{a.name}": a.verdicts for a in attacks if a.harness}
    out = []
    for job, v in zip(jobs, verdicts, strict=True):
        want_pass = job.id in ("harness:correct_candidate", "harness:patch_builtins")
        ok = (v.status == "pass") == want_pass and (want_pass or v.status in NOT_PASS)
        if job.id in own:
            ok = v.status in own[job.id]
        out.append(AttackResult(job.id, ok, f"check={v.status}" + (f"({v.reason})" if v.reason else "")))
    return out


def run_suite(
    sandbox: Any,
    attacks: tuple[Attack, ...] = ATTACKS,
    on_result: Callable[[AttackResult], None] | None = None,
    harness_attacks: tuple[Attack, ...] = HARNESS_ATTACKS,
) -> list[AttackResult]:
    """Run every attack in one batch of grid jobs and one batch of checks; one
    :class:`AttackResult` per attack and per harness attack (plus neighbours and leftovers rows)."""
    os.environ[SECRET_ENV] = "TOP-SECRET"
    probe = HostProbe()
    try:
        jobs = attack_jobs(probe, attacks)
        grids = sandbox.run_grids(jobs)
        checks = harness_jobs(probe, harness_attacks)
        harness_rows = _harness_results(checks, sandbox.run_checks(checks), harness_attacks)
        strays = wait_for_no_strays(sandbox.worker_pids())
        results: list[AttackResult] = []
        neighbour_problems = []
        for job, grid in zip(jobs, grids, strict=True):
            if job.id.startswith("neighbour/"):
                entry = job.entry_point
                got = tuple(tuple(v.status for v in row) for row in grid.verdicts)
                if got != NEIGHBOUR_EXPECTED[entry] or any(o.status != "valid" for o in grid.oracle):
                    neighbour_problems.append(f"{job.id}: {got}")
                continue
            attack = next(a for a in attacks if f"attack/{a.name}" == job.id)
            detail = "; ".join(p for p in (_judge(attack, grid), probe.check(attack.host_check)) if p)
            result = AttackResult(attack.name, not detail, _summary(grid), detail)
            results.append(result)
            if on_result:
                on_result(result)
        tail = [
            *harness_rows,
            AttackResult(
                "neighbours_unaffected",
                not neighbour_problems,
                f"{len(jobs) // 2} benign jobs",
                "; ".join(neighbour_problems),
            ),
            AttackResult(
                "no_leftover_processes",
                not strays,
                f"{len(strays)} stray",
                f"pids {strays}" if strays else "",
            ),
        ]
        for r in tail:
            results.append(r)
            if on_result:
                on_result(r)
        return results
    finally:
        os.environ.pop(SECRET_ENV, None)
        probe.close()
