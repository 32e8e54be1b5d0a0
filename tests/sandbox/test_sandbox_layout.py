"""The sandbox's two sides: codea1/sandbox/worker/ holds exactly what a worker process runs, and it
imports only the standard library (docs/sandbox.md, "Layout"; the contracts in .importlinter check
the same rule for codea1 and its dependencies, these tests for any package)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from codea1.sandbox.local import _BOOT, _PACKAGE_ROOT

WORKER_DIR = Path(_PACKAGE_ROOT) / "codea1" / "sandbox" / "worker"
WORKER_MODULES = {f"codea1.sandbox.worker.{p.stem}" for p in WORKER_DIR.glob("*.py") if p.stem != "__init__"}
PACKAGES = {"codea1", "codea1.sandbox", "codea1.sandbox.worker"}  # __init__ files without imports


def _imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` names anywhere in the file (lazy ones too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            names.add(node.module or "")
    return names


def test_worker_modules_import_only_the_standard_library_and_each_other() -> None:
    assert WORKER_MODULES, WORKER_DIR
    for path in sorted(WORKER_DIR.glob("*.py")):
        for name in _imported_modules(path):
            top = name.split(".")[0]
            assert (
                name == "codea1.sandbox.worker" or name in WORKER_MODULES or top in sys.stdlib_module_names
            ), f"{path.name} imports {name}: the worker side imports only the standard library"


def test_a_booting_worker_loads_exactly_the_worker_package_and_the_standard_library() -> None:
    head, _, call = _BOOT.rpartition("; ")
    assert call == "worker_main(sys.argv[2])", _BOOT  # the boot string imports, then starts the worker
    code = head + "; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, _PACKAGE_ROOT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split()) - {"__main__"}
    ours = {m for m in loaded if m.split(".")[0] == "codea1"}
    assert ours == PACKAGES | WORKER_MODULES  # nothing of the host side, nothing in worker/ unused
    assert sorted(m for m in loaded - ours if m.split(".")[0] not in sys.stdlib_module_names) == []
