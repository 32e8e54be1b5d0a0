"""vLLM's IPC sockets of an engine in another process go to a directory of the process's own, removed
when the process exits; a ``VLLM_RPC_BASE_PATH`` the user set is kept (``engine/vllm_local/ipc_dir.py``;
the engine itself: ``test_vllm_sync_multiprocess.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROGRAM = r"""
import os
from codea1.engine.vllm_local.ipc_dir import IPC_DIR_VARIABLE, use_private_ipc_dir
chosen = use_private_ipc_dir()
assert os.environ[IPC_DIR_VARIABLE] == chosen and use_private_ipc_dir() == chosen  # once per process
open(os.path.join(chosen, "left-by-vllm"), "w").close()
print(chosen)
"""


def _run(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_private_directory_is_made_and_removed_with_what_is_in_it_at_exit(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "VLLM_RPC_BASE_PATH"} | {"TMPDIR": str(tmp_path)}
    chosen = Path(_run(env))
    assert chosen.parent == tmp_path and chosen.name.startswith("codea1-vllm-ipc-")
    assert not chosen.exists()
    assert list(tmp_path.iterdir()) == []


def test_the_users_directory_is_kept(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    assert _run(os.environ | {"VLLM_RPC_BASE_PATH": str(mine)}) == str(mine)
    assert (mine / "left-by-vllm").exists()  # the user's directory is theirs: nothing removed
