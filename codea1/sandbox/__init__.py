"""Isolated execution of untrusted code against generated tests.

Start reading at :mod:`codea1.sandbox.executor` (what every sandbox offers: grids and checks), then
docs/sandbox.md (design, layers, threat model; its "Layout" section maps the files).

Two sides, two places:

* this package, the trusted host side: it plans tasks, starts and feeds the worker processes
  (:mod:`~codea1.sandbox.local` on this machine's cores, :mod:`~codea1.sandbox.cluster` on every
  node of a Ray cluster), decodes what comes back and decides every verdict;
* :mod:`codea1.sandbox.worker`, the worker side: the code that runs inside the sandboxed worker
  process (``python -I -S``) and its forks. It imports only the standard library and itself
  (the import-linter contracts in ``.importlinter`` check it), so the host may import it (its
  value codec, its isolation constants) but never the reverse.

``Sandbox`` (from :mod:`codea1.sandbox.local`, this machine's cores) and ``ClusterSandbox`` (from
:mod:`codea1.sandbox.cluster`, every node of a Ray cluster) are re-exported lazily so that the
sandbox worker, which imports this package as the parent of :mod:`codea1.sandbox.worker`, stays lean.
"""

from __future__ import annotations

from typing import Any

_HOMES = {
    "Sandbox": "local",
    "SandboxUnavailable": "executor",
    "WorkerFailure": "executor",
    "TaskExecutor": "executor",
    "default_sandbox_config": "local",
    "ClusterSandbox": "cluster",
}
__all__ = list(_HOMES)


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        from importlib import import_module  # here, not above: the worker imports this package

        return getattr(import_module(f"codea1.sandbox.{_HOMES[name]}"), name)
    raise AttributeError(name)
