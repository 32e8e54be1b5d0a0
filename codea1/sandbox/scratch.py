"""Scratch roots of sandbox pools: named after their owner process, removed once the owner is gone.

Each :class:`~codea1.sandbox.local.Sandbox` keeps its workers' scratch directories under one root in
the temporary directory. A pool removes its root when it closes; a pool that was killed (``kill
-9``) cannot, so every start first removes the roots whose owner process no longer runs.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT_PREFIX = "codea1-sandbox-"


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot), or ``None`` when there is no such process."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def make_root() -> str:
    """A new scratch root ``<tmp>/codea1-sandbox-<pid>-<start ticks>-XXXX`` naming its owner process."""
    return tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-{_start_ticks(os.getpid()) or 0}-")


def remove_stale_roots(directory: str | None = None) -> int:
    """Remove scratch roots (``codea1-sandbox-<pid>-<start>-*``) of this user whose owner process is gone.

    An owner is gone when no process has its pid, or the process with that pid started at another
    time (the pid was reused). Roots named otherwise are left alone. Returns how many were removed.
    """
    base = directory or tempfile.gettempdir()
    try:
        names = os.listdir(base)
    except OSError:
        return 0
    removed = 0
    for name in names:
        pid, _, rest = name.removeprefix(ROOT_PREFIX).partition("-")
        start = rest.partition("-")[0]
        if not name.startswith(ROOT_PREFIX) or not (pid.isdigit() and start.isdigit()):
            continue
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        owner_start = _start_ticks(int(pid))
        if owner_start is not None and start in ("0", str(owner_start)):
            continue  # the owner still runs (start 0: its start time was unknown, the pid decides)
        _remove_tree(path)
        removed += 1
    return removed


def _remove_tree(path: str) -> None:
    """``shutil.rmtree`` that first makes directories a sandboxed program locked (mode 000) accessible."""

    def unlock(func: Any, target: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
        except OSError:
            return
        try:
            func(target)
        except OSError:
            pass

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=unlock)
    else:
        shutil.rmtree(path, onerror=unlock)
