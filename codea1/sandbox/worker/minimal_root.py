"""A minimal root file system for the worker: only what programs may read, nothing of the host.

Worker side (standard library only). In its own mount namespace the zygote mounts a small tmpfs
on its scratch directory, bind-mounts into it, read-only and at their usual paths, the trees that
Landlock would let a program read (the interpreter, its site-packages, the system libraries, a few
``/dev`` nodes), mounts the size-limited scratch tmpfs at the scratch path, and makes that tmpfs
the new ``/`` with ``pivot_root``; the host's tree is then detached. Host ``/tmp``, ``/run``,
``/var/run``, ``/home``, ``/proc`` and ``/sys`` do not exist inside: a host socket, a Ray session
directory or a ``docker.sock`` cannot be reached, and not even found with ``os.stat``. Landlock
still applies on top (it decides what may be written; this decides what exists).
"""

from __future__ import annotations

import ctypes
import os
import stat

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_SYS_PIVOT_ROOT = 155  # x86_64
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC = 32, 4096, 0x4000
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 1024, 2048, 1 << 21
_MNT_DETACH = 2
_ROOT_TMPFS_KB = 1024
"""The root tmpfs holds only mount points and symlinks."""


def _error(what: str) -> str:
    e = ctypes.get_errno()
    return f"{what}: {os.strerror(e)} (errno {e})"


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> str:
    rc = _libc.mount(
        source.encode(), target.encode(), fstype.encode() if fstype else None, ctypes.c_ulong(flags),
        data.encode() if data else None,
    )  # fmt: skip
    return "" if rc == 0 else _error(f"mount {target}")


def _locked_flags(path: str) -> int:
    """The flags of ``path``'s mount that a read-only remount must keep (a user namespace may not
    clear them)."""
    f = os.statvfs(path).f_flag
    out = 0
    for st_flag, ms_flag in ((os.ST_NOSUID, _MS_NOSUID), (os.ST_NODEV, _MS_NODEV), (os.ST_NOEXEC, _MS_NOEXEC),
                             (os.ST_NOATIME, _MS_NOATIME), (os.ST_NODIRATIME, _MS_NODIRATIME),
                             (os.ST_RELATIME, _MS_RELATIME)):  # fmt: skip
        if f & st_flag:
            out |= ms_flag
    return out


def outermost(paths: list[str]) -> list[str]:
    """Absolute, normalised ``paths`` without those inside another one (its bind mount holds them)."""
    out: list[str] = []
    for p in sorted({os.path.normpath(p) for p in paths if p.startswith("/")}):
        if p != "/" and not any(p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out


def _bind_read_only(path: str, new_root: str) -> str:
    """Recreate ``path`` under ``new_root``: a symlink as the same symlink, else a read-only bind."""
    target = new_root + path
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.islink(path):
        os.symlink(os.readlink(path), target)
        return ""
    is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
    why = _mount(path, target, None, _MS_BIND | _MS_REC)
    if why:
        return why
    # read-only is best effort: Landlock already forbids writes there
    _mount("none", target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _locked_flags(target))
    return ""


def pivot_to_minimal_root(
    read_only: list[str], writable_files: list[str], scratch: str, scratch_mb: int
) -> str:
    """Make a root holding only ``read_only`` (read-only), ``writable_files`` (device nodes such as
    ``/dev/null``, bound as they are) and a fresh ``scratch_mb`` MiB tmpfs at ``scratch``; pivot
    into it and detach the host's tree. Returns "" on success, else why not (then nothing changed
    that the caller relies on: the old root is still ``/``).

    Must run in a private mount namespace, before any untrusted code, with ``scratch`` an empty
    directory. Paths that do not exist here are skipped.
    """
    new_root = scratch
    why = _mount("tmpfs", new_root, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={_ROOT_TMPFS_KB}k,mode=0755")
    if why:
        return why
    why = _build_and_pivot(read_only, writable_files, new_root, scratch, scratch_mb)
    if why and os.path.ismount(new_root):
        _libc.umount2(new_root.encode(), _MNT_DETACH)  # with every bind mount below it
    return why


def _build_and_pivot(
    read_only: list[str], writable_files: list[str], new_root: str, scratch: str, scratch_mb: int
) -> str:
    try:
        for path in outermost([p for p in read_only if os.path.lexists(p)]):
            why = _bind_read_only(path, new_root)
            if why:
                return why
        for path in writable_files:
            if not os.path.exists(path):
                continue
            target = new_root + path
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
            why = _mount(path, target, None, _MS_BIND)
            if why:
                return why
        os.makedirs(new_root + scratch, exist_ok=True)
        why = _mount("tmpfs", new_root + scratch, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                     f"size={scratch_mb}m,mode=0700")  # fmt: skip
        if why:
            return why
        os.chdir(new_root)
        if _libc.syscall(_SYS_PIVOT_ROOT, b".", b".") != 0:
            return _error("pivot_root")
        if _libc.umount2(b".", _MNT_DETACH) != 0:  # the old root, stacked under the new one
            return _error("umount old root")
        _mount("none", "/", None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
        os.chdir("/")
        return ""
    except OSError as e:
        return f"building the root: {e}"
