"""Kernel isolation primitives: namespaces, mounts, rlimits, scrubbed environment, cgroup v1.

The worker side (namespaces, mounts, rlimits, environment) runs inside the sandbox worker; the
cgroup side (:class:`WorkerCgroups`) runs in the trusted parent, which creates one cgroup per
worker and removes it on close. Every function reports what it could not do instead of failing
silently: the results end up in ``Sandbox.layers()`` and ``codea1 sandbox doctor``.
Imports: standard library only.
"""

from __future__ import annotations

import ctypes
import os
import resource
import shutil
import sys
from pathlib import Path

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
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
    """Move the calling process into new net, mount and pid namespaces (+ user ns when not root).

    The pid namespace applies to children forked afterwards. Returns a layer-status dict.
    """
    names = {"net_ns": CLONE_NEWNET, "mount_ns": CLONE_NEWNS, "pid_ns": CLONE_NEWPID}
    if isolation == "none":
        return {k: unavailable("isolation=none") for k in names}
    status: dict[str, str] = {}
    if os.geteuid() != 0:
        why = unshare(CLONE_NEWUSER)
        status["user_ns"] = ACTIVE if not why else unavailable(why)
        if not why:
            uid, gid = os.geteuid(), os.getegid()
            try:
                Path("/proc/self/setgroups").write_text("deny")
                Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
                Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
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


def setup_mounts(layers: dict[str, str], scratch: str, scratch_mb: int) -> None:
    """In a fresh mount namespace: private propagation, a new /proc, a tmpfs scratch dir."""
    if layers.get("mount_ns") != ACTIVE:
        layers["scratch_tmpfs"] = unavailable("no mount namespace (scratch is a plain directory)")
        return
    why = mount("none", "/", None, _MS_REC | _MS_PRIVATE, None)
    if why:
        layers["mount_ns"] = unavailable(why)
        layers["scratch_tmpfs"] = unavailable(why)
        return
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


def apply_program_rlimits(memory_mb: int, cpu_s: float) -> None:
    """rlimits of a program process: address space, CPU (kernel backstop), file size, files, core."""
    mem = memory_mb * 1024 * 1024
    cpu = int(cpu_s) + 2
    for res, soft, hard in (
        (resource.RLIMIT_AS, mem, mem),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, 16 << 20, 16 << 20),
        (resource.RLIMIT_NOFILE, 64, 64),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        resource.setrlimit(res, (soft, hard))
    if os.geteuid() != 0:  # ignored for root; pids.max covers that case
        resource.setrlimit(resource.RLIMIT_NPROC, (256, 256))


def confinement_paths(scratch: str) -> tuple[list[str], list[str]]:
    """(read-only, read-write) path lists for Landlock: interpreter and system libraries only."""
    ro = {sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr", "/lib", "/lib64", "/etc/ld.so.cache"}
    ro |= {"/etc/localtime", "/dev/urandom", "/dev/random", "/dev/zero"}
    for entry in sys.path:
        if entry and os.path.isdir(entry) and any(entry.startswith(p) for p in (sys.prefix, sys.base_prefix)):
            ro.add(entry)
    return sorted(ro), [scratch, "/dev/null"]


# --------------------------------------------------------------------------------------------------
# cgroup v1 (trusted parent side)
# --------------------------------------------------------------------------------------------------

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own_cgroup(controller: str) -> str | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            return parts[2]
    return None


class WorkerCgroups:
    """One worker's cgroups (v1 memory, pids, cpu), nested under the caller's own cgroups."""

    def __init__(self, name: str, memory_bytes: int, pids_max: int, enabled: bool) -> None:
        self.dirs: dict[str, Path] = {}
        self.status: dict[str, str] = {}
        settings = {
            "memory": {"memory.limit_in_bytes": str(memory_bytes)},
            "pids": {"pids.max": str(pids_max)},
            "cpu": {"cpu.shares": "1024"},
        }
        for controller, values in settings.items():
            layer = f"cgroup_{controller}"
            if not enabled:
                self.status[layer] = unavailable("isolation=none")
                continue
            own = _own_cgroup(controller)
            base = CGROUP_ROOT / controller
            if own is None or not base.is_dir():
                self.status[layer] = unavailable(f"no cgroup v1 {controller} hierarchy")
                continue
            path = base / own.lstrip("/") / name
            try:
                path.mkdir(exist_ok=True)
                for key, value in values.items():
                    (path / key).write_text(value)
            except OSError as e:
                self.status[layer] = unavailable(f"{path}: {e.strerror or e}")
                _rmdir(path)
                continue
            self.dirs[controller] = path
            self.status[layer] = ACTIVE

    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a worker writes its pid into."""
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def pids(self) -> list[int]:
        """Pids currently in this worker's cgroups."""
        out: set[int] = set()
        for d in self.dirs.values():
            try:
                out |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                pass
        return sorted(out)

    def kill_all(self, sig: int = 9) -> None:
        """SIGKILL every process left in the cgroups (a dead worker's stragglers)."""
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass

    def remove(self) -> None:
        """Kill what is left and remove the cgroup directories."""
        self.kill_all()
        for d in self.dirs.values():
            _rmdir(d)
        self.dirs.clear()


def remove_stale_cgroups() -> int:
    """Remove empty ``codea1-<pid>-…`` worker cgroups whose creating process is gone; returns the count."""
    removed = 0
    for controller in ("memory", "pids", "cpu"):
        own = _own_cgroup(controller)
        base = CGROUP_ROOT / controller / (own or "/").lstrip("/")
        try:
            # siblings too: each command of a process manager may get its own memory cgroup
            entries = list(base.glob("codea1-*")) + list(base.parent.glob("*/codea1-*"))
        except OSError:
            continue
        for path in entries:
            owner = path.name.split("-")[1]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                try:
                    path.rmdir()
                    removed += 1
                except OSError:
                    pass
    return removed


def _rmdir(path: Path) -> None:
    for _ in range(100):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            import time

            time.sleep(0.01)


def wipe_directory(path: str) -> None:
    """Remove everything inside ``path`` (symlinks are removed, never followed)."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        except OSError:
            pass
