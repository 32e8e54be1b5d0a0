"""A private directory for the IPC sockets of vLLM engines whose core runs in another process.

vLLM's multiprocess engines (CUDA, a Ray replica) talk to their engine core over ZMQ sockets that
are files named ``<uuid>`` in ``VLLM_RPC_BASE_PATH`` (the system's temporary directory unless set),
and its shutdown leaves them behind: seven files per engine started and shut down on a CPU with
vLLM 0.32 (``tests/engine/test_vllm_sync_multiprocess.py``). :func:`use_private_ipc_dir` points that variable
at a directory of this process's own, removed when the process exits, before the first such engine
starts; a value the user set is kept.

Imports: the standard library only.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

IPC_DIR_VARIABLE = "VLLM_RPC_BASE_PATH"
"""vLLM's environment variable for the directory of its IPC socket files."""


def use_private_ipc_dir() -> str:
    """The directory vLLM's engines of this process put their IPC sockets in: the user's
    ``VLLM_RPC_BASE_PATH`` when set, else a new ``codea1-vllm-ipc-*`` temporary directory, set as
    that variable (read by vLLM as an engine starts, and inherited by its engine-core process) and
    removed with what is in it when this process exits."""
    if chosen := os.environ.get(IPC_DIR_VARIABLE):
        return chosen
    private = tempfile.mkdtemp(prefix="codea1-vllm-ipc-")
    atexit.register(shutil.rmtree, private, ignore_errors=True)
    os.environ[IPC_DIR_VARIABLE] = private
    return private
