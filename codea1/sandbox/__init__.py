"""Isolated execution of untrusted code against generated tests.

``Sandbox`` (from :mod:`codea1.sandbox.pool`) is re-exported lazily so that the sandbox worker,
which imports submodules of this package, stays lean.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Sandbox", "SandboxUnavailable", "default_sandbox_config"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from codea1.sandbox import pool

        return getattr(pool, name)
    raise AttributeError(name)
