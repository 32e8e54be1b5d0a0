"""cgroup v1 of the sandbox workers (trusted parent side): memory, pids and cpu shares.

The parent creates one cgroup per worker, nested under its own, and removes it on close; each
worker joins them before it starts anything. What could not be set up is reported as a layer
status (``Sandbox.layers()``), never silently skipped.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from codea1.sandbox.worker.isolation import ACTIVE, unavailable

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
            time.sleep(0.01)
