"""Isolated execution of untrusted code against generated tests.

``Sandbox`` (from :mod:`codea1.sandbox.pool`, this machine's cores) and ``ClusterSandbox`` (from
:mod:`codea1.sandbox.cluster`, every node of a Ray cluster) are re-exported lazily so that the
sandbox worker, which imports submodules of this package, stays lean.
"""

from __future__ import annotations

from typing import Any

_HOMES = {
    "Sandbox": "pool",
    "SandboxUnavailable": "executor",
    "WorkerFailure": "executor",
    "TaskExecutor": "executor",
    "default_sandbox_config": "pool",
    "ClusterSandbox": "cluster",
}
__all__ = list(_HOMES)


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        from importlib import import_module  # here, not above: the worker imports this package

        return getattr(import_module(f"codea1.sandbox.{_HOMES[name]}"), name)
    raise AttributeError(name)
