"""``engine.cpu_malloc: tcmalloc``: ``codea1 train`` restarts itself once with TCMalloc preloaded.

An allocator replaces ``malloc`` only when the dynamic linker loads it before anything else
(``LD_PRELOAD``), so it cannot be switched on from inside a running Python. ``codea1 train`` resolves
its configuration first (nothing is loaded, no output exists yet); when that asks for TCMalloc and
the process does not have it, the command raises :class:`Relaunch` and :func:`codea1.cli.main`,
once the command's own cleanup has run, replaces the process with the same command line and
``LD_PRELOAD`` naming the library. The restarted process sees :data:`RELAUNCHED_ENV` and never
restarts again, whatever it finds. Run in-process (``codea1.cli.main(argv)``), a command never
restarts: it says what it runs on. The sandbox's workers start with an environment of their own, so
the preload never reaches candidate code.

Imports: os, sys, config, engine.host_memory.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from codea1.config import EngineConfig
from codea1.engine.host_memory import TCMALLOC_INSTALL, tcmalloc_library, tcmalloc_loaded

RELAUNCHED_ENV = "CODEA1_MALLOC_RELAUNCHED"
"""Set in the restarted process's environment (and removed from it at once): restart once only."""


class Relaunch(Exception):
    """The command must start again in a process whose ``LD_PRELOAD`` names ``library``."""

    def __init__(self, library: str) -> None:
        super().__init__(library)
        self.library = library

    def environment(self) -> dict[str, str]:
        """The restarted process's environment: this one's, the library first in ``LD_PRELOAD``."""
        env = dict(os.environ)
        preload = env.get("LD_PRELOAD", "").strip()
        env["LD_PRELOAD"] = f"{self.library} {preload}" if preload else self.library
        env[RELAUNCHED_ENV] = "1"
        return env

    def exec(self) -> NoReturn:
        """Replace this process with the same command (``python -m codea1 ARGS``) on the library."""
        sys.stdout.flush()
        sys.stderr.flush()
        argv = [sys.executable, "-m", "codea1", *sys.argv[1:]]
        os.execve(sys.executable, argv, self.environment())


def malloc_in_use(engine: EngineConfig, *, can_restart: bool) -> str:
    """What this process allocates with, as the run's header says it; raises :class:`Relaunch` when
    ``engine.cpu_malloc`` asks for TCMalloc, the process lacks it, the backend is the local one (on
    Ray the preload would reach Ray's own servers and workers, untried), the library is there and
    the command ``can_restart`` (it runs as the program, not in-process, and has not restarted yet)."""
    restarted = os.environ.pop(RELAUNCHED_ENV, None) is not None
    if tcmalloc_loaded():
        return "tcmalloc"
    if engine.cpu_malloc != "tcmalloc":
        return "system"
    if engine.backend != "local":  # the preload would reach Ray's own processes: not measured there
        return "system (engine.cpu_malloc=tcmalloc: the local backend only)"
    library = tcmalloc_library()
    if library is None:
        return f"system (TCMalloc not found; {TCMALLOC_INSTALL})"
    if restarted:
        return f"system (engine.cpu_malloc=tcmalloc: LD_PRELOAD={library} did not load it)"
    if not can_restart:
        return "system (engine.cpu_malloc=tcmalloc: run in-process, not restarted on TCMalloc)"
    raise Relaunch(library)
