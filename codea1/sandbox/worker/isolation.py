"""Kernel isolation primitives of the worker side: namespaces, mounts, rlimits, scrubbed environment.

(The cgroups, set up by the trusted parent, are in :mod:`codea1.sandbox.cgroups`.) Every function
reports what it could not do instead of failing silently: the results end up in
``Sandbox.layers()`` and ``codea1 sandbox doctor``. The worker loads this module, so it uses no
module with a large native library (each one mapped makes every fork of the worker dearer).
"""

from __future__ import annotations

import ctypes
import math
import os
import resource
import sys

from codea1.sandbox.worker import minimal_root

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
CLONE_NEWIPC = 0x08000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
_PR_SET_PDEATHSIG = 1

ACTIVE = "active"
_libc = ctypes.CDLL(None, use_errno=True)


def unavailable(why: str) -> str:
    """The layer status string for a layer that is not in force."""
    return f"unavailable: {why}"


def _err(what: str) -> str:
    e = ctypes.get_errno()
    return f"{what}: {os.strerror(e)} (errno {e})"


def unshare(flags: int) -> str:
    """``unshare(2)``; returns "" on success, else the error text."""
    return "" if _libc.unshare(ctypes.c_int(flags)) == 0 else _err("unshare")


def enter_namespaces(isolation: str) -> dict[str, str]:
    """Move the calling process into new net, mount, pid and IPC namespaces (+ user ns when not root).

    The pid namespace applies to children forked afterwards. The net namespace also holds the
    abstract UNIX socket names; the IPC namespace holds System V IPC objects and POSIX message
    queues, so host ones cannot be attached by key. Returns a layer-status dict.
    """
    names = {"net_ns": CLONE_NEWNET, "mount_ns": CLONE_NEWNS, "pid_ns": CLONE_NEWPID, "ipc_ns": CLONE_NEWIPC}
    if isolation == "none":
        return {k: unavailable("isolation=none") for k in names}
    status: dict[str, str] = {}
    if os.geteuid() != 0:
        why = unshare(CLONE_NEWUSER)
        status["user_ns"] = ACTIVE if not why else unavailable(why)
        if not why:
            uid, gid = os.geteuid(), os.getegid()
            try:
                for name, text in (
                    ("setgroups", "deny"),
                    ("uid_map", f"0 {uid} 1"),
                    ("gid_map", f"0 {gid} 1"),
                ):
                    with open(f"/proc/self/{name}", "w") as f:
                        f.write(text)
            except OSError as e:
                status["user_ns"] = unavailable(f"id maps: {e}")
    for name, flag in names.items():
        why = unshare(flag)
        status[name] = ACTIVE if not why else unavailable(why)
    return status


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> str:
    """``mount(2)``; returns "" on success, else the error text."""
    rc = _libc.mount(
        source.encode(), target.encode(), fstype.encode() if fstype else None, ctypes.c_ulong(flags),
        data.encode() if data else None,
    )  # fmt: skip
    return "" if rc == 0 else _err(f"mount {target}")


def setup_mounts(layers: dict[str, str], scratch: str, scratch_mb: int, read_only: list[str]) -> None:
    """In a fresh mount namespace: private propagation, then a minimal root holding only
    ``read_only``, ``/dev/null`` and a tmpfs scratch dir (:mod:`minimal_root`).

    Where the minimal root cannot be built, the host's tree stays (``minimal_root`` unavailable):
    a new /proc and a tmpfs scratch dir are mounted on it as before.
    """
    if layers.get("mount_ns") != ACTIVE:
        layers["scratch_tmpfs"] = unavailable("no mount namespace (scratch is a plain directory)")
        layers["minimal_root"] = unavailable("no mount namespace (host paths are visible)")
        return
    why = mount("none", "/", None, _MS_REC | _MS_PRIVATE, None)
    if why:
        layers["mount_ns"] = unavailable(why)
        layers["scratch_tmpfs"] = unavailable(why)
        layers["minimal_root"] = unavailable(why)
        return
    why = minimal_root.pivot_to_minimal_root(read_only, ["/dev/null"], scratch, scratch_mb)
    if not why:
        layers["minimal_root"] = ACTIVE
        layers["scratch_tmpfs"] = ACTIVE
        return
    layers["minimal_root"] = unavailable(why)
    if layers.get("pid_ns") == ACTIVE:
        mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    why = mount("tmpfs", scratch, "tmpfs", flags, f"size={scratch_mb}m,mode=0700")
    layers["scratch_tmpfs"] = ACTIVE if not why else unavailable(why)


def set_parent_death_signal(sig: int) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent exits."""
    _libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


def scrub_environment(scratch: str) -> None:
    """Replace the environment with a minimal, secret-free one."""
    os.environ.clear()
    os.environ.update(
        {
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "NUMEXPR_NUM_THREADS": "1",
        }
    )  # fmt: skip


def worker_environment() -> dict[str, str]:
    """The environment a worker process starts with (nothing of the caller's is passed on)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    env.update({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    return env


def test_cpu_rlimit(budget_s: float) -> int:
    """RLIMIT_CPU soft limit (whole seconds) of a test child: the kernel backstop above its itimer."""
    return int(math.ceil(budget_s)) + 1


def apply_program_rlimits(memory_mb: int, cpu_s: float, test_cpu_s: float) -> None:
    """rlimits of a program process: address space, CPU (kernel backstop), file size, files, core.

    The CPU soft limit is the program's own budget. The hard limit also leaves room for the test
    children's limits (:func:`test_cpu_rlimit` + 1): they inherit it and cannot raise it, and a
    test budget may exceed the load budget (e.g. evaluation harnesses). A program that ignores
    SIGXCPU during its definitions is still bounded by the runner's load deadline.
    """
    mem = memory_mb * 1024 * 1024
    cpu = int(cpu_s) + 2
    cpu_hard = max(cpu + 1, test_cpu_rlimit(test_cpu_s) + 1)
    for res, soft, hard in (
        (resource.RLIMIT_AS, mem, mem),
        (resource.RLIMIT_CPU, cpu, cpu_hard),
        (resource.RLIMIT_FSIZE, 16 << 20, 16 << 20),
        (resource.RLIMIT_NOFILE, 64, 64),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        resource.setrlimit(res, (soft, hard))
    if os.geteuid() != 0:  # ignored for root; pids.max covers that case
        resource.setrlimit(resource.RLIMIT_NPROC, (256, 256))


def confinement_paths(scratch: str, site_dirs: list[str]) -> tuple[list[str], list[str]]:
    """(read-only, read-write) path lists for Landlock: interpreter, its site-packages, system libraries."""
    ro = {sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr", "/lib", "/lib64", "/etc/ld.so.cache"}
    ro |= {"/etc/localtime", "/dev/urandom", "/dev/random", "/dev/zero"}
    ro |= {d for d in site_dirs if os.path.isdir(d)}
    for entry in sys.path:
        if entry and os.path.isdir(entry) and any(entry.startswith(p) for p in (sys.prefix, sys.base_prefix)):
            ro.add(entry)
    return sorted(ro), [scratch, "/dev/null"]


def wipe_directory(path: str) -> None:
    """Remove everything inside ``path``; symlinks are removed, never followed. Keeps the cwd.

    Runs in the zygote once every job process is gone, so nothing changes the tree meanwhile. It
    walks by ``chdir`` with an explicit stack, so neither nesting depth nor path length can make
    it fail, and it makes each directory accessible before entering it. (No ``shutil``: it would
    load three compression libraries into every fork of the worker.)
    """
    try:
        home = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        home = -1
    try:
        os.chdir(path)
        _wipe_cwd()
    except OSError:
        pass
    finally:
        if home >= 0:
            os.fchdir(home)
            os.close(home)


def _wipe_cwd() -> None:
    stack: list[str] = []
    while True:
        try:
            entries = list(os.scandir("."))
        except OSError:
            entries = []
        sub = None
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    sub = sub or entry.name
                else:
                    os.unlink(entry.name)
            except OSError:
                pass
        if sub is not None:
            try:  # O_NOFOLLOW + fchmod: no symlink is followed, and no /proc is needed (the
                # minimal root has none; glibc's chmod without following symlinks goes through it)
                fd = os.open(sub, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            except OSError:
                fd = -1
            if fd >= 0:
                try:
                    os.fchmod(fd, 0o700)
                    os.fchdir(fd)
                    stack.append(sub)
                    continue
                except OSError:
                    pass  # cannot enter: leave it (and stop descending into it)
                finally:
                    os.close(fd)
        if not stack:
            break
        os.chdir("..")
        name = stack.pop()
        try:
            os.rmdir(name)
        except OSError:  # something in it could not be removed: stop rather than loop
            break
