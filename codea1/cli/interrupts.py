"""Ctrl-C and SIGTERM where a verb must not be cut short: while a sandbox shuts down (its workers,
cgroups and scratch directory go together or not at all) and once the command is over (the
interpreter's exit callbacks, torch's among them, then run to the end instead of printing a
``KeyboardInterrupt`` traceback).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any, TypeVar

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
T = TypeVar("T")


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block ends, then raise ``KeyboardInterrupt`` for them (the
    block itself runs to its end). Outside the main thread signals cannot be caught: a no-op."""
    if not _in_main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        pending.append(signum)

    previous = {s: signal.signal(s, hold) for s in _SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if pending:
        raise KeyboardInterrupt


@contextlib.contextmanager
def closed_whole(resource: AbstractContextManager[T]) -> Iterator[T]:
    """``with closed_whole(Sandbox(cfg)) as sandbox:`` is ``with Sandbox(cfg) as sandbox:`` whose
    exit (the shutdown) runs with interrupts held (:func:`deferred_interrupts`), so an interrupt
    never leaves it half done."""
    entered = resource.__enter__()
    try:
        yield entered
    except BaseException:
        with deferred_interrupts():
            if not resource.__exit__(*sys.exc_info()):
                raise
    else:
        with deferred_interrupts():
            resource.__exit__(None, None, None)


def ignore_interrupts() -> None:
    """From now on Ctrl-C and SIGTERM do nothing: the command has finished (or printed why it
    stopped) and the process is only exiting. Only the main thread can change signal handlers."""
    if _in_main_thread():
        for s in _SIGNALS:
            signal.signal(s, signal.SIG_IGN)
