"""``engine.cpu_malloc: tcmalloc``: ``codea1 train`` restarts itself once with TCMalloc preloaded.

An allocator replaces ``malloc`` only when the dynamic linker loads it before anything else
(``LD_PRELOAD``), so it cannot be switched on from inside a running Python. ``codea1 train`` resolves
its configuration first (nothing is loaded, no output exists yet); when that asks for TCMalloc and
the process does not have it, the command raises :class:`Relaunch` and :func:`codea1.cli.main`,
once the command's own cleanup has run, replaces the process with the same command line and
``LD_PRELOAD`` naming the library; the restarted interpreter imports the same codea1, from the
directory this one imported it from, and nothing from the working directory. The restarted
process sees :data:`RELAUNCHED_ENV` and never restarts again, whatever it finds. Run in-process (``codea1.cli.main(argv)``), a command never
restarts: it says what it runs on. The sandbox's workers start with an environment of their own, so
the preload never reaches candidate code.

Imports: os, sys, pathlib, config, engine.host_memory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

from codea1.config import EngineConfig
from codea1.engine.host_memory import (
    TCMALLOC_INSTALL,
    tcmalloc_library,
    tcmalloc_loaded,
    tcmalloc_named_problem,
)

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
        """Replace this process with the same command on the library: the same interpreter runs
        :data:`RESTART_PROGRAM`, which imports codea1 from the directory this process imported it
        from, never from the working directory (``python -m codea1`` would run a ``./codea1``)."""
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, restart_argv(sys.argv[1:]), self.environment())


RESTART_PROGRAM = (
    "import sys; root = sys.argv.pop(1); sys.path[:] = [root, *(p for p in sys.path if p)]; "
    "from codea1.cli import main; sys.exit(main())"
)
"""What the restarted interpreter runs (``python -c``): the directory given first, ahead of every
other import path and without the working directory (the ``""`` that ``-c`` puts first), then the
command-line interface with the arguments that follow."""


def restart_argv(args: list[str]) -> list[str]:
    """The restarted process's command line: this interpreter, :data:`RESTART_PROGRAM`, the directory
    that holds the running ``codea1`` package, then ``args``."""
    root = Path(__file__).resolve().parents[2]  # codea1/cli/malloc_relaunch.py: above the package
    return [sys.executable, "-c", RESTART_PROGRAM, str(root), *args]


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
        problem = tcmalloc_named_problem()
        return f"system ({problem})" if problem else f"system (TCMalloc not found; {TCMALLOC_INSTALL})"
    if restarted:
        return f"system (engine.cpu_malloc=tcmalloc: LD_PRELOAD={library} did not load it)"
    if not can_restart:
        return "system (engine.cpu_malloc=tcmalloc: run in-process, not restarted on TCMalloc)"
    raise Relaunch(library)
