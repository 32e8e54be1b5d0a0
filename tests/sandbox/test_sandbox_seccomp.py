"""The hand-assembled seccomp filters and the Landlock probe, exercised in forked children."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from codea1.sandbox.worker import landlock, seccomp


def _in_child(fn) -> int:  # type: ignore[no-untyped-def]
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = fn()
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


needs_seccomp = pytest.mark.skipif(bool(seccomp.unavailable_reason()), reason="seccomp unavailable here")


@needs_seccomp
def test_program_filter_denies_sockets_exec_and_signals_to_protected_pids() -> None:
    def body() -> int:
        seccomp.install(seccomp.program_filter([os.getppid()]))
        a, b = socket.socketpair()  # a nameless stream pair stays allowed (asyncio's self-pipe)
        a.sendall(b"x")
        if b.recv(1) != b"x":
            return 2
        for attempt in (lambda: socket.socket(), lambda: socket.socket(socket.AF_UNIX),
                        lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM),
                        lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM),
                        lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET),
                        lambda: os.kill(os.getppid(), 0), lambda: os.kill(-1, 0),
                        lambda: os.execv("/bin/true", ["true"])):  # fmt: skip
            try:
                attempt()
                return 1
            except PermissionError:
                pass
        os.kill(os.getpid(), 0)
        pid = os.fork()  # still allowed at program level
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        return 0

    assert _in_child(body) == 0


@needs_seccomp
def test_test_filter_denies_fork_but_allows_threads() -> None:
    def body() -> int:
        seccomp.install(seccomp.program_filter([]))
        seccomp.install(seccomp.test_filter(os.getpid()))
        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()
        try:
            os.fork()
            return 1
        except PermissionError:
            pass
        try:
            os.kill(os.getppid(), 0)
            return 2
        except PermissionError:
            return 0

    assert _in_child(body) == 0


@pytest.mark.skipif(landlock.abi_version() == 0, reason="Landlock unavailable here")
def test_landlock_limits_reads_and_writes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "secret").write_text("s")
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def body() -> int:
        landlock.restrict_self(["/usr"], [str(scratch)])
        (scratch / "ok").write_text("fine")
        for attempt in (
            lambda: (tmp_path / "secret").read_text(),
            lambda: (tmp_path / "new").write_text("x"),
        ):
            try:
                attempt()
                return 1
            except PermissionError:
                pass
        return 0

    assert _in_child(body) == 0
    assert not (tmp_path / "new").exists()


@needs_seccomp
def test_prepared_filters_match_the_built_ones_and_behave_the_same() -> None:
    prepared = seccomp.PreparedFilters()

    def body() -> int:
        prepared._f2.patch((os.getpid(),))
        if bytes(prepared._f2.buf.raw) != seccomp.test_filter(os.getpid()):
            return 3
        prepared.install_program((1, os.getppid(), os.getppid()))
        for attempt in (lambda: socket.socket(), lambda: os.kill(os.getppid(), 0), lambda: os.kill(-1, 0)):
            try:
                attempt()
                return 1
            except PermissionError:
                pass
        os.kill(os.getpid(), 0)
        prepared.install_test(os.getpid())
        os.kill(os.getpid(), 0)
        try:
            os.fork()
            return 2
        except PermissionError:
            return 0

    assert _in_child(body) == 0
