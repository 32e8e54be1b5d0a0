"""Probe an isolation layer in a throwaway forked child: confine it, then check a call is denied.

Standard library only, so the lean sandbox worker can import it.
"""

from __future__ import annotations

import os
from collections.abc import Callable


def denied_in_child(confine: Callable[[], object], attempt: Callable[[], object]) -> str:
    """Fork; in the child run ``confine()`` then ``attempt()``, which must raise PermissionError.

    Returns "" when it did, else why the probe failed (exit 1: the attempt was allowed; 2: confining
    raised). The parent is never confined.
    """
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            confine()
            try:
                attempt()
            except PermissionError:
                code = 0
        except BaseException:  # noqa: BLE001
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return "" if code == 0 else f"probe failed (exit {code})"
