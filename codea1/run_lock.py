"""One training process per run directory: an exclusive ``flock`` on ``RUN_DIR/train.lock``.

The lock file holds the holder's pid, host and start time, so a refused process can say who holds
the run. The kernel drops the lock when the holder exits or dies (``kill -9`` included), so a stale
file never blocks anyone; the file itself is left in place (removing it would let a third process
lock a fresh file while a second still waits on the old one). Re-acquiring a lock this process
already holds is allowed (the CLI takes it early, the trainer takes it again).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType

LOCK_FILE = "train.lock"

_held: dict[Path, tuple[int, int]] = {}
"""Run directories locked by this process: resolved path -> (file descriptor, nesting depth)."""


class RunDirBusy(RuntimeError):
    """Another process holds the run directory; the message names it (pid, host, start time)."""


def _holder(path: Path) -> str:
    """Who holds the lock, as recorded in the lock file (best effort: it may be mid-write)."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        return f"pid {info['pid']} on {info['host']}, started {info['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (its details are not readable yet)"


class RunDirLock:
    """``with RunDirLock(run_dir):`` holds the run directory exclusively; raises :class:`RunDirBusy`
    at once (no waiting) when another process holds it. The directory must exist."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._key = self.run_dir.resolve()

    def acquire(self) -> None:
        """Take the lock (or deepen this process's hold on it)."""
        if self._key in _held:
            fd, depth = _held[self._key]
            _held[self._key] = (fd, depth + 1)
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunDirBusy(f"run directory {self.run_dir} is in use by {_holder(self.path)}") from None
        except BaseException:
            os.close(fd)
            raise
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": started})
        os.ftruncate(fd, 0)
        os.pwrite(fd, (record + "\n").encode(), 0)
        _held[self._key] = (fd, 1)

    def release(self) -> None:
        """Undo one :meth:`acquire`; the last one unlocks (the file stays)."""
        fd, depth = _held[self._key]
        if depth > 1:
            _held[self._key] = (fd, depth - 1)
            return
        del _held[self._key]
        os.close(fd)  # closing the descriptor drops the flock

    def __enter__(self) -> RunDirLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
